import { Kafka, logLevel } from 'kafkajs';
import type { Bus } from './port.js';
import { kafkaBus, type KafkaBusBaseOptions } from './kafkaCommon.js';
import { kafkajsAdmin } from './kafkajs/admin.js';
import { connectionConfig, kafkaLogger } from './kafkajs/config.js';
import { kafkajsConsumers } from './kafkajs/consumer.js';
import { kafkajsProducer } from './kafkajs/producer.js';
import { kafkajsReader } from './kafkajs/read.js';

/**
 * kafkajs has no static membership (group.instance.id) and no option for a consumer's member id: a consumer
 * restarted after a kill -9, or restarted by kafkajs after the broker was away, joins as a new member, and its
 * join is answered once the group's old member's session (KAFKA_SESSION_TIMEOUT_MS) ran out. This adapter uses
 * kafkajs' public API only; @platformatic/kafka (the default, KAFKA_CLIENT=platformatic) rejoins at once as
 * its static member. See docs/operations.md#kafka-client.
 */
export type KafkaBusOptions = KafkaBusBaseOptions;

/**
 * The Bus port on Kafka. kafkajs stays behind this file and kafkajs/ (config.ts: connection and logging;
 * producer.ts; admin.ts: topics, groups, lag and offsets; read.ts; consumer.ts): another client would replace
 * these only.
 */
export async function createKafkaBus(opts: KafkaBusOptions): Promise<Bus> {
  const log = opts.logger.child({ component: 'kafka' });
  const publishTimeoutMs = opts.publishTimeoutMs ?? 5_000;
  const connection = connectionConfig(opts.security);
  const kafka = new Kafka({
    clientId: opts.clientId,
    brokers: opts.brokers,
    ...connection,
    logLevel: logLevel.WARN,
    logCreator: kafkaLogger(log),
    connectionTimeout: 3_000,
    requestTimeout: publishTimeoutMs,
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1_000 },
  });
  const admin = kafkajsAdmin(kafka, { clientId: opts.clientId, brokers: opts.brokers, connection });
  const producer = kafkajsProducer(kafka, log);
  const readTopic = kafkajsReader(kafka, opts, admin);
  const consumers = kafkajsConsumers(kafka, opts, log);

  // Many HTTP requests, one round trip; one send in flight; fail fast while the broker is away (createKafkaPublisher).
  const parts = {
    brokers: opts.brokers,
    admin: admin.busAdmin,
    replicationFactor: opts.replicationFactor,
    publishTimeoutMs,
    producer: {
      lingerMs: opts.lingerMs,
      stallMs: opts.stallMs,
      connect: producer.connect,
      sendAll: producer.sendAll,
      brokerAway: producer.brokerAway,
      tooLarge: producer.tooLarge,
      replaceProducer: producer.replaceProducer,
    },
  };
  return kafkaBus(parts, {
    consume: consumers.consume,
    lag: admin.lag,
    offsets: admin.offsets,
    read: (topic, ro = {}) => readTopic(topic, ro),

    async close() {
      await consumers.close();
      await producer.disconnect().catch(() => {});
      await admin.disconnect().catch(() => {});
    },
  });
}
