import databasesPg, { pgFormat, sql, type SQLQuery, type ConnectionPool } from '@databases/pg';
import pg from 'pg';
import { isServerUnavailable } from './pgErrors.js';
import { postgresTls } from './postgresTls.js';
import { processStatementNames } from './preparedStatements.js';

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
  /** Its engine in words, for a start banner or a span: 'PostgreSQL' or 'PGlite'. */
  readonly description: string;
  /**
   * The database is one connection inside this process (PGlite): a transaction held open holds up every other
   * statement, and no other thread or process can connect to it.
   */
  readonly oneConnection: boolean;
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
  /**
   * How long a query may wait in all for a pooled connection while the server goes on answering the pool's other
   * queries (a busy pool, not an outage): its wait is renewed each queueTimeoutMs that saw a query answered, up to
   * this. Default 8 s.
   */
  busyWaitMs?: number;
  /** Statements that repeat run as server-side prepared statements (preparedStatements.ts). Default true. */
  preparedStatements?: boolean;
}

/** The database cannot be reached now (connection refused or lost, pool wait timed out): retry later. */
export class DatabaseUnavailableError extends Error {
  /** The driver's code of the cause (ECONNREFUSED, ...), kept so that code reading `code` sees through the wrapper. */
  readonly code?: string;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'DatabaseUnavailableError';
    const code = (options?.cause as { code?: unknown } | undefined)?.code;
    if (typeof code === 'string') this.code = code;
  }
}

/**
 * Where a PostgreSQL URL points, for messages an operator reads: `host:port/database`, never the user or the
 * password. A URL that does not parse is not quoted (it may hold a password): it is called DATABASE_URL.
 */
export function postgresLocation(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return 'DATABASE_URL (not a URL)';
  }
  // libpq's `?host=` (a socket directory or another host) wins over the authority, as the driver reads it.
  const host = u.searchParams.get('host') ?? (u.hostname || 'localhost');
  const port = u.searchParams.get('port') ?? (u.port || '5432');
  const database = decodeURIComponent(u.pathname.replace(/^\//, '')) || decodeURIComponent(u.username) || 'postgres';
  return `${host}:${port}/${database}`;
}

/** The cause of an outage in a few words: the driver's code, else its message's first line. */
function reasonOf(e: unknown): string {
  const err = e as { code?: unknown; message?: unknown } | null;
  const message = typeof err?.message === 'string' ? err.message.split('\n')[0] : String(e);
  return typeof err?.code === 'string' && !message.includes(err.code) ? `${err.code}: ${message}` : message;
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
  // No connection within connectionTimeoutMs: a host that does not answer (a dropped SYN, a dead address).
  'CONNECTION_POOL:OPEN_TIMEOUT',
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
    /Connection terminated|Timed out waiting for connection|timeout expired|Client has encountered a connection error|error establishing an SSL connection/i.test(
      err.message,
    )
  );
}

/** A Db over a PostgreSQL server, through @databases/pg. */
export function connectPostgres(opts: PostgresOptions): Db {
  const where = postgresLocation(opts.url);
  // Every connection below with the same TLS, read from the URL as libpq would (postgresTls.ts).
  const { url, ssl } = postgresTls(opts.url);
  const tls = ssl === undefined ? {} : { ssl };
  const unavailable = (e: unknown) =>
    e instanceof DatabaseUnavailableError ? e : new DatabaseUnavailableError(`PostgreSQL at ${where} is unreachable: ${reasonOf(e)}`, { cause: e });
  const queueTimeoutMs = opts.queueTimeoutMs ?? 2_000;
  const pool: ConnectionPool = createConnectionPool({
    connectionString: url,
    ...tls,
    bigIntMode: 'string',
    poolSize: opts.poolSize ?? 10,
    applicationName: opts.applicationName ?? 'shopstream',
    // While the database is away, a request fails within seconds (answered 503) instead of waiting in the
    // pool's queue for a minute: a connection attempt gives up after 2 s, a wait for a pooled one after 2 s
    // (queries that were waiting when the server went away; the ones after it fail at once, see guard).
    connectionTimeoutMilliseconds: opts.connectionTimeoutMs ?? 2_000,
    queueTimeoutMilliseconds: queueTimeoutMs,
    // Each failure of a query reaches its caller. An error on an idle pooled connection (the server shutting
    // down or the connection cut) is the first sign of an outage, seconds before a query's connection attempt
    // gives up: it opens the breaker at once (a probe closes it again within milliseconds if that was all).
    onError: (e: unknown) => {
      if (isDatabaseUnavailable(e)) trip(e);
    },
    // Statements that repeat run as server-side prepared statements (preparedStatements.ts): the driver runs the
    // formatted query it hands these handlers, so a name set on it is the one the statement runs under.
    ...(opts.preparedStatements === false
      ? {}
      : {
          onQueryStart: (_q: SQLQuery, f: { readonly text: string; readonly values: readonly unknown[] }) => {
            const name = processStatementNames.nameFor(f.text, f.values);
            if (name !== undefined) (f as { name?: string }).name = name;
          },
          onQueryError: (_q: SQLQuery, f: { readonly text: string }, e: Error) => processStatementNames.failed(f.text, (f as { name?: string }).name, e),
        }),
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
  // The probe's pause between attempts, ended early by close(): a close() awaiting a pause on an unref'd timer
  // let a CLI whose query had failed end with exit 0 and nothing said (nothing else kept the process alive).
  let wake: (() => void) | undefined;
  let closed = false;
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      if (closed) return resolve();
      const t = setTimeout(resolve, ms);
      // A service's server keeps its process alive; a probe alone must not.
      t.unref();
      wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
  const probe = () => {
    probing ??= (async () => {
      while (down) {
        const client = new pg.Client({
          connectionString: url,
          ...tls,
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
          else await pause(250);
        } finally {
          await client.end().catch(() => {});
        }
      }
    })().finally(() => (probing = undefined));
  };
  function trip(e: unknown) {
    if (closed) return;
    down = true;
    downBecause = e;
    probe();
  }
  // When the server last answered a query of this pool: a wait for a connection that ran out while others were
  // answered says the pool is busy (every connection in use on a loaded machine), not that the server is away.
  // Taking it for an outage opened the breaker on a busy pool, and every read behind it was answered 503 until
  // the probe connected (faults rebuild-under-load: up to 978 reads on a 2-core host whose queries took 0.2 s).
  let answeredAt = 0;
  const busyWaitMs = opts.busyWaitMs ?? 8_000;
  const guard = async <T>(fn: () => Promise<T>): Promise<T> => {
    const since = Date.now();
    for (;;) {
      if (down) throw new DatabaseUnavailableError(`PostgreSQL at ${where} is unreachable: ${reasonOf(downBecause)}`, { cause: downBecause });
      const attempt = Date.now();
      try {
        const result = await fn();
        answeredAt = Date.now();
        return result;
      } catch (e) {
        if (!isDatabaseUnavailable(e)) {
          answeredAt = Date.now();
          throw e;
        }
        // The pool's own queue timeout fires before this call's query or transaction starts, so waiting again runs
        // nothing twice. Not one wrapped by a guard (a pool query made inside a transaction's callback): that
        // transaction ran and rolled back, and running its callback again could repeat what it did outside.
        if (!(e instanceof DatabaseUnavailableError) && (e as { code?: unknown }).code === 'CONNECTION_POOL:QUEUE_TIMEOUT' && answeredAt >= attempt) {
          if (Date.now() - since + queueTimeoutMs <= busyWaitMs) continue;
          // Busy for the whole wait: refused (503, retry later), but the breaker stays closed for the others.
          throw new DatabaseUnavailableError(`PostgreSQL at ${where} is busy: no pooled connection free within ${Math.round((Date.now() - since) / 1000)} s`, {
            cause: e,
          });
        }
        trip(e);
        // Named where it could not reach (the driver says only `connect ECONNREFUSED 127.0.0.1:5432`).
        throw unavailable(e);
      }
    }
  };
  return {
    kind: 'postgres',
    description: 'PostgreSQL',
    oneConnection: false,
    query: (q) => guard(() => pool.query(q)),
    tx: (fn) => guard(() => pool.tx((t) => fn(t))),
    async listen(channel, onNotify) {
      // LISTEN needs one session for its whole life, which a pool cannot promise.
      const client = new pg.Client({
        connectionString: url,
        ...tls,
        application_name: `${opts.applicationName ?? 'shopstream'}-listen`,
        connectionTimeoutMillis: opts.connectionTimeoutMs ?? 2_000,
      });
      await client.connect().catch((e: unknown) => {
        throw isDatabaseUnavailable(e) ? unavailable(e) : e;
      });
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
      wake?.();
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
