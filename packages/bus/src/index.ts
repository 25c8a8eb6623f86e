export * from './port.js';
export { createKafkaBus, type KafkaBusOptions } from './kafka.js';
export { createPgLogBus, type PgLogBusOptions, UnknownTopicError } from './pglog/index.js';
export { createMicroBatcher, type MicroBatcher, type MicroBatcherOptions } from './microBatcher.js';
export { runProjection, type Projection, type ProjectionOptions, type ValidRecord } from './projection.js';
export { topicNames, type TopicNames } from './topicNames.js';
export { enqueueOutbox, drainOutbox, startOutboxDrainer, runProjectionWithOutbox, type OutboxRow, type DrainOutboxOptions, type OutboxDrainer } from './outbox.js';
