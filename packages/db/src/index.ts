export {
  sql,
  connectPostgres,
  formatQuery,
  isDatabaseUnavailable,
  DatabaseUnavailableError,
  postgresLocation,
  type Db,
  type Queryable,
  type SQLQuery,
  type PostgresOptions,
} from './db.js';
export { openPglite } from './openPglite.js';
export { migrate, migrationSteps, packageMigrations, workspaceServiceMigrations, type MigrationStep, type MigrationSource } from './migrate.js';
export { openDb, embeddedEngine, type DbConfig, type EmbeddedEngine } from './openDb.js';
export { openEmbeddedPostgres, embeddedPostgresBinaries, embeddedServerUrl, runningServer, clusterDir } from './embeddedPostgres.js';
export { lockDataDir, lockHolder, DataDirLockedError } from './dataDirLock.js';
export { copyRows, canCopy } from './copy.js';
export { queryRows, queryRow, type Row, type RowDecoder } from './rows.js';
export {
  sqlState,
  pgErrorCode,
  isUniqueViolation,
  isSerializationFailure,
  isDeadlock,
  isLockNotAvailable,
  isNoDataFound,
  isConflict,
  isDataError,
  isServerUnavailable,
} from './pgErrors.js';
export { keysetOrder, newestFirst, type Position, type PageQuery } from './keyset.js';
