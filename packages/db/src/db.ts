import databasesPg, { pgFormat, sql, type SQLQuery, type ConnectionPool } from '@databases/pg';
import pg from 'pg';

// @databases/pg is CommonJS: under NodeNext its default import is the module object, callable at run time.
const createConnectionPool = databasesPg as unknown as (typeof databasesPg)['default'];

export { sql };
export type { SQLQuery };

/** Anything that runs SQL: the pool itself or a transaction. */
export interface Queryable {
  query(query: SQLQuery): Promise<any[]>;
}

export interface Db extends Queryable {
  readonly kind: 'postgres' | 'pglite';
  /** Runs fn in one transaction; commits when it resolves, rolls back when it throws. */
  tx<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /** LISTEN on a channel; the returned function stops listening. */
  listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

export interface PostgresOptions {
  url: string;
  poolSize?: number;
  applicationName?: string;
}

/** A Db over a PostgreSQL server, through @databases/pg. */
export function connectPostgres(opts: PostgresOptions): Db {
  const pool: ConnectionPool = createConnectionPool({
    connectionString: opts.url,
    bigIntMode: 'string',
    poolSize: opts.poolSize ?? 10,
    applicationName: opts.applicationName ?? 'shopstream',
  });
  const listeners = new Set<pg.Client>();
  return {
    kind: 'postgres',
    query: (q) => pool.query(q),
    tx: (fn) => pool.tx((t) => fn(t)),
    async listen(channel, onNotify) {
      // LISTEN needs one session for its whole life, which a pool cannot promise.
      const client = new pg.Client({ connectionString: opts.url, application_name: `${opts.applicationName ?? 'shopstream'}-listen` });
      await client.connect();
      client.on('notification', (n) => {
        if (n.channel === channel) onNotify(n.payload ?? '');
      });
      client.on('error', () => {
        /* the caller keeps polling as a fallback; a dead listener only costs latency */
      });
      await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
      listeners.add(client);
      return async () => {
        listeners.delete(client);
        await client.end().catch(() => {});
      };
    },
    async close() {
      await Promise.all([...listeners].map((c) => c.end().catch(() => {})));
      await pool.dispose();
    },
  };
}

/** Formats an @databases SQLQuery as text and parameters for drivers other than @databases/pg. */
export function formatQuery(q: SQLQuery): { text: string; values: unknown[] } {
  return q.format(pgFormat);
}
