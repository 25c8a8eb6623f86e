export { sql, connectPostgres, formatQuery, type Db, type Queryable, type SQLQuery, type PostgresOptions } from './db.js';
export { openPglite } from './pglite.js';
export { migrate } from './migrate.js';
export { openDb, type DbConfig } from './openDb.js';
export { lockDataDir, DataDirLockedError } from './dataDirLock.js';
