export { sql, connectPostgres, formatQuery, isDatabaseUnavailable, DatabaseUnavailableError, type Db, type Queryable, type SQLQuery, type PostgresOptions } from './db.js';
export { openPglite } from './pglite.js';
export { migrate } from './migrate.js';
export { openDb, embeddedEngine, type DbConfig, type EmbeddedEngine } from './openDb.js';
export { openEmbeddedPostgres, embeddedPostgresBinaries, embeddedServerUrl, runningServer, clusterDir } from './embeddedPostgres.js';
export { lockDataDir, lockHolder, DataDirLockedError } from './dataDirLock.js';
export { copyRows, canCopy, type CopyValue } from './copy.js';
