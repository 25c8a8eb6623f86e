export * from './port.js';
export { createKafkaBus, type KafkaBusOptions, type MemberIdStore } from './kafka.js';
export { createPlatformaticKafkaBus, type PlatformaticKafkaBusOptions } from './kafkaPlatformatic.js';
export {
  createPgLogBus,
  type PgLogBusOptions,
  UnknownTopicError,
  UnsupportedTopicConfigError,
  trimExpiredRecords,
  type TrimmedPartition,
} from './pglog/index.js';
export { createMicroBatcher, type MicroBatcher, type MicroBatcherOptions } from './microBatcher.js';
export {
  defineProjection,
  runLiveProjection,
  applyBatch,
  sendToDeadLetters,
  liveGroupId,
  type Projection,
  type ProjectionDefinition,
  type ProjectionDeclaration,
  type ProjectionLogic,
  type ProjectionDeps,
  type LiveProjectionOptions,
  type ApplyMode,
  type Rejected,
  type ValidRecord,
} from './projection.js';
export {
  rebuildProjection,
  projectionStatus,
  RebuildRefusedError,
  RebuildStalledError,
  type RebuildOptions,
  type RebuildProgress,
  type ProjectionStatus,
} from './rebuild.js';
export { topicNames, topicOf, type TopicNames } from './topicNames.js';
export { tracedBus } from './tracedBus.js';
export { appendToOutbox, relayOutbox, startOutboxRelay, type EmittedRecord, type RelayOptions, type OutboxRelay } from './outbox.js';
export { ownedTopics, ownedTopicSpecs, roleConfig, finiteRetention, KEEP_FOREVER, type OwnedTopic, type OwnedTopicSpec, type TopicRole } from './topicRoles.js';
export {
  listDeadLetters,
  redriveDeadLetters,
  sourceOfDeadLetterTopic,
  type DeadLetter,
  type DeadLetterFilter,
  type RedriveMark,
  type RedriveOptions,
  type RedriveReport,
} from './deadLetters.js';
export { recordBytes, splitForSend, type Send } from './sendSize.js';
