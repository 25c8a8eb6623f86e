export { createPgLogBus, type PgLogBusOptions } from './pgLogBus.js';
export { UnknownTopicError } from './appendRecords.js';
