import { randomBytes } from 'node:crypto';

export {
  ensureKafka,
  startLocalKafka,
  startLocalKafkaCluster,
  waitForKafka,
  type KafkaClusterHandle,
  type KafkaClusterNode,
  type KafkaClusterOptions,
  type KafkaHandle,
  type KafkaOptions,
  type KafkaSource,
} from './kafka.js';
export {
  createTestDatabase,
  dropTestDatabase,
  ensurePostgres,
  startLocalPostgres,
  waitForPostgres,
  type PostgresHandle,
  type PostgresOptions,
  type PostgresSource,
} from './postgres.js';
export { testInfra } from './testInfra.js';
export { OAUTH_SESSION_MS, startSecureKafka, unsignedJwt, type SecureKafkaHandle } from './secureKafka.js';
export { makeTestCertificates, type TestCertificates } from './testCertificates.js';
export { ensurePromtool } from './promtool.js';
export { ensureChromium, ChromiumUnavailableError } from './chromium.js';
export { ensureKcat, type Kcat } from './kcat.js';
export { kafkaClasspath } from './kafka.js';
export { ensureOpenApiGenerator, OPENAPI_GENERATOR_VERSIONS } from './openapiGenerator.js';
export { InfraUnavailableError } from './unavailable.js';
export { waitFor } from './waitFor.js';
export { freePort, processAlive } from './proc.js';
export { KAFKA_IMAGE, KAFKA_VERSION, POSTGRES_IMAGE } from './versions.js';
// Record fixtures shared by the service specs, test/ and seeding: conversations-topic records and event records.
export { conversationUpserted, conversationWithMessage, messageCreated, testConversation } from './conversations.js';
export { eventRecordOf, type EventRecordFields } from './eventRecordFixture.js';

/**
 * A topic-name prefix like `t1a2b3c4d.` that no other spec file gets, so parallel files on the same broker
 * never read each other's records or fight over consumer groups.
 */
export function uniquePrefix(): string {
  return `t${randomBytes(4).toString('hex')}.`;
}
