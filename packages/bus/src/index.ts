export * from './port.js';
export { createKafkaBus, type KafkaBusOptions } from './kafka.js';
export { createPgLogBus, type PgLogBusOptions, UnknownTopicError, UnsupportedTopicConfigError, trimExpiredRecords, type TrimmedPartition } from './pglog/index.js';
export { createMicroBatcher, type MicroBatcher, type MicroBatcherOptions } from './microBatcher.js';
export { runProjection, type Projection, type ProjectionOptions, type ValidRecord } from './projection.js';
export { topicNames, type TopicNames } from './topicNames.js';
export { ownedTopics, ownedTopicSpecs, roleConfig, finiteRetention, KEEP_FOREVER, type OwnedTopic, type OwnedTopicSpec, type TopicRole } from './topicRoles.js';
export { enqueueOutbox, drainOutbox, startOutboxDrainer, runProjectionWithOutbox, type OutboxRow, type DrainOutboxOptions, type OutboxDrainer } from './outbox.js';
