export * from './port.js';
export { createKafkaBus, type KafkaBusOptions } from './kafka.js';
export type { PlatformaticKafkaBusOptions } from './kafkaPlatformatic.js';
import type { Bus } from './port.js';
import type { PlatformaticKafkaBusOptions } from './kafkaPlatformatic.js';
/**
 * createPlatformaticKafkaBus, loaded on first call: @platformatic/kafka takes 0.5 to 2 s to import, which the
 * embedded mode (no Kafka), processes on KAFKA_CLIENT=kafkajs and CLI commands that need no bus would otherwise pay.
 */
export async function createPlatformaticKafkaBus(opts: PlatformaticKafkaBusOptions): Promise<Bus> {
  return (await import('./kafkaPlatformatic.js')).createPlatformaticKafkaBus(opts);
}
export { securityFailure, type KafkaSasl, type KafkaSecurity } from './kafka/security.js';
export { oauthBearerTokens, OAuthBearerTokenError, type OAuthBearerSettings } from './kafka/oauthBearer.js';
export {
  createPgLogBus,
  type PgLogBusOptions,
  UnknownTopicError,
  UnsupportedTopicConfigError,
  trimExpiredRecords,
  type TrimmedPartition,
} from './pglog/index.js';
export { createKeyedMicroBatcher, createMicroBatcher, type MicroBatcher, type MicroBatcherOptions } from './microBatcher.js';
export { topicNames, topicOf, type TopicNames } from './topicNames.js';
export { tracedBus } from './tracedBus.js';
// For the projection engine (@shopstream/projections): a consumed batch's span, a supervised consumer, a refused publish.
export { traceBatch, type BatchTrace } from './tracedBatch.js';
export { superviseConsumer } from './supervisor.js';
export { PublishRefusedError } from './kafka/brokerGate.js';
export { ownedTopics, ownedTopicSpecs, roleConfig, finiteRetention, KEEP_FOREVER, type OwnedTopic, type OwnedTopicSpec, type TopicRole } from './topicRoles.js';
export { recordBytes, splitForSend, type Send } from './sendSize.js';
// Lag and offset arithmetic, for the adapters and for whoever reports where a group or a projection stands.
export { etaSeconds, partitionLag, recordsBefore, recordsBehind, recordsHeld, totalLag, type Offset } from './offsetMath.js';
// For the adapters' conformance suite (@shopstream/bus-conformance) and any adapter written outside this package.
export { type KafkaBusBaseOptions } from './kafkaCommon.js';
export { partitionFor } from './pglog/partitionFor.js';
export { appendRecords } from './pglog/appendRecords.js';
