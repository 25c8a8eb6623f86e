export { createPgLogBus, type PgLogBusOptions, UnsupportedTopicConfigError } from './pgLogBus.js';
export { trimExpiredRecords, type TrimmedPartition } from './trimRecords.js';
export { UnknownTopicError } from './appendRecords.js';
