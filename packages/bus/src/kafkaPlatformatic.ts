import type { Bus } from './port.js';
import { kafkaBus, type KafkaBusBaseOptions } from './kafkaCommon.js';
import { platformaticAdmin } from './platformatic/admin.js';
import { clientBase } from './platformatic/client.js';
import { platformaticConsumers } from './platformatic/consumer.js';
import { platformaticProducer } from './platformatic/producer.js';
import { platformaticReader } from './platformatic/read.js';

export interface PlatformaticKafkaBusOptions extends KafkaBusBaseOptions {
  /**
   * Static group membership (KIP-345, group.instance.id): this instance of a service, stable across its
   * restarts. A consumer restarted after a kill -9 takes its place in the group at once, with the partitions
   * it had, instead of joining as a new member held until the dead one's session ran out. The id is per group,
   * so one instance id serves every group of the process. Unset: every start joins as a new member.
   */
  groupInstanceId?: string;
  /**
   * A handled batch's position waits up to this long to be committed together with every other
   * partition the subscription handled meanwhile, in one OffsetCommit (a quiet consumer's first commit goes at once).
   * Under load that is one commit a second per consumer instead of one per partition's batch. A crash hands the last
   * interval's batches to the next member again (at least once, as any crash between a handler and its commit); a
   * projection skips them by its checkpoint. A rebalance, a rewind and a stop commit at once. Default 1 s; 0 commits
   * each batch as it is handled.
   */
  commitIntervalMs?: number;
}

/**
 * The Bus port on @platformatic/kafka (KAFKA_CLIENT=platformatic): the same behaviour as the kafkajs adapter
 * (kafka.ts) on a pure TypeScript client that spends about half the CPU per record. Records land on the same
 * partitions whichever adapter wrote them (Kafka's murmur2 partitioner, partitionFor). Its parts, in platformatic/:
 * client.ts (connection settings, helpers), producer.ts, admin.ts (topics, groups, lag and offsets), read.ts,
 * consumer.ts.
 */
export async function createPlatformaticKafkaBus(opts: PlatformaticKafkaBusOptions): Promise<Bus> {
  const log = opts.logger.child({ component: 'kafka', client: 'platformatic' });
  const publishTimeoutMs = opts.publishTimeoutMs ?? 5_000;
  const base = clientBase(opts, publishTimeoutMs);
  const admin = platformaticAdmin(base, opts);
  const producer = platformaticProducer(base, opts, log);
  const reader = platformaticReader(base, opts, admin);
  const consumers = platformaticConsumers(base, opts, log);

  // Many HTTP requests, one round trip; one send in flight; fail fast while the broker is away (createKafkaPublisher).
  const parts = {
    brokers: opts.brokers,
    admin: admin.busAdmin,
    replicationFactor: opts.replicationFactor,
    publishTimeoutMs,
    producer: {
      lingerMs: opts.lingerMs,
      stallMs: opts.stallMs,
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
    read: (topic, ro = {}) => reader.read(topic, ro),

    async close() {
      await consumers.close();
      await producer.close().catch(() => {});
      await reader.close();
      await admin.admin.close().catch(() => {});
    },
  });
}
