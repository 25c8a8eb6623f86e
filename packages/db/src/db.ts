import databasesPg, { pgFormat, sql, type SQLQuery, type ConnectionPool } from '@databases/pg';
import pg from 'pg';
import { isServerUnavailable } from './pgErrors.js';

// @databases/pg is CommonJS: under NodeNext its default import is the module object, callable at run time.
const createConnectionPool = databasesPg as unknown as (typeof databasesPg)['default'];

export { sql };
export type { SQLQuery };

/** A row as the driver returns it: column name to value (timestamps as Date, bigints as decimal strings). */
export type Row = Record<string, unknown>;

/** Anything that runs SQL: the pool itself or a transaction. */
export interface Queryable {
  /**
   * Runs a statement. Its rows are not typed beyond `Row`: read them through a store's decoder (queryRows /
   * queryRow, rows.ts) rather than by field access on this result.
   */
  query(query: SQLQuery): Promise<Row[]>;
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

const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'CONNECTION_POOL:QUEUE_TIMEOUT',
]);

/** True for an error that says the database is away, not that the query was wrong. */
export function isDatabaseUnavailable(e: unknown): boolean {
  if (e instanceof DatabaseUnavailableError) return true;
  const err = e as { code?: unknown; message?: unknown } | null;
  if (!err || typeof err !== 'object') return false;
  const code = typeof err.code === 'string' ? err.code : '';
  if (UNREACHABLE_CODES.has(code) || isServerUnavailable(e)) return true;
  return (
    typeof err.message === 'string' &&
    /Connection terminated|Timed out waiting for connection|timeout expired|Client has encountered a connection error/i.test(err.message)
  );
}

/** A Db over a PostgreSQL server, through @databases/pg. */
export function connectPostgres(opts: PostgresOptions): Db {
  const pool: ConnectionPool = createConnectionPool({
    connectionString: opts.url,
    bigIntMode: 'string',
    poolSize: opts.poolSize ?? 10,
    applicationName: opts.applicationName ?? 'shopstream',
    // While the database is away, a request fails within seconds (answered 503) instead of waiting in the
    // pool's queue for a minute: a connection attempt gives up after 2 s, a wait for a pooled one after 2 s
    // (queries that were waiting when the server went away; the ones after it fail at once, see guard).
    connectionTimeoutMilliseconds: opts.connectionTimeoutMs ?? 2_000,
    queueTimeoutMilliseconds: opts.queueTimeoutMs ?? 2_000,
    // Each failure of a query reaches its caller. An error on an idle pooled connection (the server shutting
    // down or the connection cut) is the first sign of an outage, seconds before a query's connection attempt
    // gives up: it opens the breaker at once (a probe closes it again within milliseconds if that was all).
    onError: (e: unknown) => {
      if (isDatabaseUnavailable(e)) trip(e);
    },
  });
  const listeners = new Set<pg.Client>();
  // A circuit breaker. Once a query finds the server unreachable, every query fails at once (answered 503 in
  // milliseconds) until a probe of our own connects again: the pool is kept out of it, because @databases/pg
  // retries a failed connection for 2 s before failing and its queue fills behind those attempts, so letting
  // requests through every second held them for 2-8 s each through an outage (faults postgres-outage).
  // The probe is a bare pg.Client with a 1 s connect timeout, at most one at a time, every 250 ms.
  let down = false;
  let downBecause: unknown;
  let probing: Promise<void> | undefined;
  const probe = () => {
    probing ??= (async () => {
      while (down) {
        const client = new pg.Client({
          connectionString: opts.url,
          connectionTimeoutMillis: 1_000,
          application_name: `${opts.applicationName ?? 'shopstream'}-probe`,
        });
        client.on('error', () => {});
        try {
          await client.connect();
          await client.query('SELECT 1');
          down = false;
        } catch (e) {
          downBecause = e;
          // Reachable but refusing (a dropped database, a bad password): not an outage, and the queries'
          // own errors say more than the breaker's.
          if (!isDatabaseUnavailable(e)) down = false;
          else await new Promise((r) => setTimeout(r, 250).unref());
        } finally {
          await client.end().catch(() => {});
        }
      }
    })().finally(() => (probing = undefined));
  };
  let closed = false;
  function trip(e: unknown) {
    if (closed) return;
    down = true;
    downBecause = e;
    probe();
  }
  const guard = async <T>(fn: () => Promise<T>): Promise<T> => {
    if (down) throw new DatabaseUnavailableError('The database is unreachable.', { cause: downBecause });
    try {
      return await fn();
    } catch (e) {
      if (isDatabaseUnavailable(e)) trip(e);
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
      closed = true;
      down = false;
      await probing;
      await Promise.all([...listeners].map((c) => c.end().catch(() => {})));
      await pool.dispose();
    },
  };
}

/** Formats an @databases SQLQuery as text and parameters for drivers other than @databases/pg. */
export function formatQuery(q: SQLQuery): { text: string; values: unknown[] } {
  return q.format(pgFormat);
}
