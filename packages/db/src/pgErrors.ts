/**
 * PostgreSQL errors by class, from their SQLSTATE (https://www.postgresql.org/docs/current/errcodes-appendix.html),
 * so callers ask `isUniqueViolation(e)` instead of testing codes by hand. Works on errors from pg (the server)
 * and PGlite alike: both carry the SQLSTATE in `code`.
 */
export const sqlState = {
  uniqueViolation: '23505',
  foreignKeyViolation: '23503',
  serializationFailure: '40001',
  deadlockDetected: '40P01',
  lockNotAvailable: '55P03',
  /** RAISE ... USING ERRCODE = 'P0002' (no_data_found): the bus's append names unknown topics with it. */
  noDataFound: 'P0002',
  tooManyConnections: '53300',
  adminShutdown: '57P01',
  crashShutdown: '57P02',
  cannotConnectNow: '57P03',
} as const;

/** The SQLSTATE of a database error, or undefined for anything else. */
export function pgErrorCode(e: unknown): string | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

const is =
  (code: string) =>
  (e: unknown): boolean =>
    pgErrorCode(e) === code;

export const isUniqueViolation = is(sqlState.uniqueViolation);
export const isSerializationFailure = is(sqlState.serializationFailure);
export const isDeadlock = is(sqlState.deadlockDetected);
export const isLockNotAvailable = is(sqlState.lockNotAvailable);
export const isNoDataFound = is(sqlState.noDataFound);

/** Another transaction was in the way (a serialization failure, a deadlock, a lock not had in time): retry later. */
export const isConflict = (e: unknown): boolean => isSerializationFailure(e) || isDeadlock(e) || isLockNotAvailable(e);

/**
 * An error that retrying the same statement with the same data cannot fix: data exceptions (class 22: out-of-range
 * values, bad encodings), integrity constraint violations (23) and limits such as an index row too large (54).
 */
export function isDataError(e: unknown): boolean {
  const code = pgErrorCode(e);
  return code !== undefined && /^(22|23|54)/.test(code);
}

/** The server is away or refuses connections for now: connection exceptions (08), shutting down or starting (57P01-57P03), too many connections. */
export function isServerUnavailable(e: unknown): boolean {
  const code = pgErrorCode(e);
  if (code === undefined) return false;
  return (
    code.startsWith('08') ||
    code === sqlState.tooManyConnections ||
    code === sqlState.adminShutdown ||
    code === sqlState.crashShutdown ||
    code === sqlState.cannotConnectNow
  );
}
