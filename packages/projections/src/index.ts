// The projection engine over the bus port (@shopstream/bus): live projections, rebuilds, the outbox relay and
// dead letters.
export {
  defineProjection,
  runLiveProjection,
  applyBatch,
  sendToDeadLetters,
  liveGroupId,
  moveCheckpoint,
  LAG_INTERVAL_MS,
  type Projection,
  type ProjectionDefinition,
  type ProjectionDeclaration,
  type ProjectionLogic,
  type ProjectionDeps,
  type LiveProjectionOptions,
  type ApplyMode,
  type BatchOutcome,
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
export { appendToOutbox, relayOutbox, startOutboxRelay, type EmittedRecord, type RelayOptions, type OutboxRelay } from './outbox.js';
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
