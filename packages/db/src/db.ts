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
  connectionTimeoutMs?: number;
  queueTimeoutMs?: number;
}

/** The database cannot be reached now (connection refused or lost, pool wait timed out): retry later. */
export class DatabaseUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'DatabaseUnavailableError';
  }
}

const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'CONNECTION_POOL:QUEUE_TIMEOUT']);
// 57P01-57P03: the server is shutting down or starting; 53300: too many connections.
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300']);

/** True for an error that says the database is away, not that the query was wrong. */
export function isDatabaseUnavailable(e: unknown): boolean {
  if (e instanceof DatabaseUnavailableError) return true;
  const err = e as { code?: unknown; message?: unknown } | null;
  if (!err || typeof err !== 'object') return false;
  const code = typeof err.code === 'string' ? err.code : '';
  if (UNREACHABLE_CODES.has(code) || UNAVAILABLE_SQLSTATES.has(code) || code.startsWith('08')) return true;
  return typeof err.message === 'string' && /Connection terminated|Timed out waiting for connection|timeout expired|Client has encountered a connection error/i.test(err.message);
}

/** A Db over a PostgreSQL server, through @databases/pg. */
export function connectPostgres(opts: PostgresOptions): Db {
  const pool: ConnectionPool = createConnectionPool({
    connectionString: opts.url,
    bigIntMode: 'string',
    poolSize: opts.poolSize ?? 10,
    applicationName: opts.applicationName ?? 'shopstream',
    // While the database is away, a request fails within seconds (answered 503) instead of waiting in the
    // pool's queue for a minute: a connection attempt gives up after 2 s, a wait for a pooled one after 5 s.
    connectionTimeoutMilliseconds: opts.connectionTimeoutMs ?? 2_000,
    queueTimeoutMilliseconds: opts.queueTimeoutMs ?? 5_000,
    // Each failure reaches the caller of the query; the pool's own report would only print to stderr.
    onError: () => {},
  });
  const listeners = new Set<pg.Client>();
  // While the server is unreachable, fail at once for a second after each failed attempt (then let one try
  // again): a request is answered 503 in milliseconds instead of spending the driver's 2 s of connection
  // retries, and queued requests do not pile up behind them.
  let downUntil = 0;
  let downBecause: unknown;
  const guard = async <T>(fn: () => Promise<T>): Promise<T> => {
    if (Date.now() < downUntil) throw new DatabaseUnavailableError('The database is unreachable.', { cause: downBecause });
    try {
      return await fn();
    } catch (e) {
      if (isDatabaseUnavailable(e)) {
        downUntil = Date.now() + 1_000;
        downBecause = e;
      }
      throw e;
    }
  };
  return {
    kind: 'postgres',
    query: (q) => guard(() => pool.query(q)),
    tx: (fn) => guard(() => pool.tx((t) => fn(t))),
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
