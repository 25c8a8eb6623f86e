import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { ConfigResourceTypes, ConfigSource, Kafka, logLevel } from 'kafkajs';
import { createLogger } from '@shopstream/telemetry';
import { testInfra, uniquePrefix } from '@shopstream/testkit';
import { busConformance } from './busConformance.js';
import { BusUnavailableError, RecordsTooLargeError, type Bus, type KafkaBusBaseOptions } from '@shopstream/bus';

/** A Kafka adapter's factory (createKafkaBus, createPlatformaticKafkaBus). */
export type KafkaBusFactory = (o: KafkaBusBaseOptions) => Promise<Bus>;

/**
 * The Bus conformance suite and the Kafka adapters' own cases, against the shared broker, for one adapter:
 * every Kafka adapter runs the same cases (kafkaBus.int.spec.ts, kafkaPlatformatic.int.spec.ts).
 */
export function kafkaAdapterSuite(name: string, createKafkaBus: KafkaBusFactory): void {
  const logger = createLogger('bus-conformance', process.env.TEST_LOG_LEVEL ?? 'silent');
  const prefix = uniquePrefix();
  let clients = 0;
  const admins: ReturnType<Kafka['admin']>[] = [];

  afterAll(async () => {
    await Promise.all(admins.map((a) => a.disconnect()));
  });

  busConformance({
    name,
    kind: 'kafka',
    features: { consumerGroupsSharePartitions: true, transactionalAppends: false },
    newBus: () => createKafkaBus({ brokers: testInfra().kafkaBrokers, clientId: `conformance-${++clients}`, replicationFactor: 1, logger }),
    unreachableBus: () =>
      createKafkaBus({ brokers: ['127.0.0.1:1'], clientId: 'conformance-unreachable', replicationFactor: 1, logger, publishTimeoutMs: 1_000 }),
    topicName: (label) => `${prefix}${label}`,
    async waitForGroupMembers(groupId, members) {
      // Group membership is Kafka's own business, not the port's: ask the broker directly.
      const admin = new Kafka({ clientId: 'conformance-admin', brokers: testInfra().kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
      admins.push(admin);
      await admin.connect();
      const deadline = Date.now() + 30_000;
      for (;;) {
        const { groups } = await admin.describeGroups([groupId]);
        const g = groups[0];
        if (g?.state === 'Stable' && g.members.length === members && g.members.every((m) => m.memberAssignment.length > 0)) return;
        if (Date.now() > deadline)
          throw new Error(`group ${groupId} did not reach ${members} stable members (state ${g?.state}, ${g?.members.length} members)`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
  });

  describe(`${name} adapter`, () => {
    it('keeps publishing after a failed send: the producer that failed is replaced, and every later record lands', async () => {
      const bus = await createKafkaBus({
        brokers: testInfra().kafkaBrokers,
        clientId: 'replace-producer',
        replicationFactor: 1,
        logger,
        publishTimeoutMs: 2_000,
      });
      try {
        const topic = `${prefix}after-failure`;
        await bus.ensureTopics([{ topic, partitions: 1 }]);
        await bus.publish(topic, [{ key: 'k', value: 'before' }]);
        // A topic that does not exist (and is not auto-created): the send fails.
        await expect(bus.publish(`${prefix}missing-${Date.now()}`, [{ key: 'k', value: 'lost' }])).rejects.toBeInstanceOf(BusUnavailableError);
        for (const value of ['after-1', 'after-2', 'after-3']) await bus.publish(topic, [{ key: 'k', value }]);
        const admin = new Kafka({ clientId: 'replace-producer-admin', brokers: testInfra().kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
        admins.push(admin);
        await admin.connect();
        const [p] = await admin.fetchTopicOffsets(topic);
        expect(Number(p.high)).toBe(4);
      } finally {
        await bus.close();
      }
    }, 60_000);
  });

  describe(`${name} adapter: a topic that takes less than Shopstream's limit`, () => {
    it("rejects a publish whose partition's records exceed the topic's max.message.bytes with RecordsTooLargeError, writing none, and takes a smaller one", async () => {
      const bus = await createKafkaBus({ brokers: testInfra().kafkaBrokers, clientId: 'too-large', replicationFactor: 1, logger });
      try {
        const topic = `${prefix}too-large`;
        // As an operator may create it: the broker's default limit (1 MiB), not Shopstream's 16 MiB.
        await bus.ensureTopics([{ topic, partitions: 1, config: { 'max.message.bytes': '1048588' } }]);
        const records = Array.from({ length: 2_000 }, (_, i) => ({ key: 'shop', value: `${i}:${'x'.repeat(1_000)}` }));
        const refused = await bus.publish(topic, records).catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(RecordsTooLargeError);
        expect((refused as Error).message).toMatch(/larger than the max message size/);
        await bus.publish(topic, records.slice(0, 500));
        const read = await bus.read(topic);
        expect(read.map((r) => r.value.toString())).toEqual(records.slice(0, 500).map((r) => r.value));
      } finally {
        await bus.close();
      }
    }, 60_000);
  });

  describe(`${name} adapter: a broker away`, () => {
    it('fails publishes at once for a moment after a send found no broker, then tries again', async () => {
      // A port nothing listens on: connection refused, as after a broker's kill -9.
      const bus = await createKafkaBus({ brokers: ['127.0.0.1:1'], clientId: 'fail-fast', replicationFactor: 1, logger, publishTimeoutMs: 3_000 });
      // The adapter's second is on Date: frozen here, so "a moment after" does not depend on how fast this
      // machine gets from one publish to the next; the test moves it past the second itself.
      vi.useFakeTimers({ toFake: ['Date'] });
      try {
        const first = await bus.publish('t', [{ key: 'k', value: 'v' }]).catch((e: unknown) => e);
        expect(first).toBeInstanceOf(BusUnavailableError);
        expect((first as Error).message).not.toMatch(/less than a second ago/);
        const second = await bus.publish('t', [{ key: 'k', value: 'v' }]).catch((e: unknown) => e);
        expect(second).toBeInstanceOf(BusUnavailableError);
        expect((second as Error).message).toMatch(/a send failed less than a second ago/);
        vi.setSystemTime(Date.now() + 1_100);
        const third = await bus.publish('t', [{ key: 'k', value: 'v' }]).catch((e: unknown) => e);
        expect(third).toBeInstanceOf(BusUnavailableError);
        expect((third as Error).message).not.toMatch(/less than a second ago/);
      } finally {
        vi.useRealTimers();
        await bus.close();
      }
    }, 60_000);
  });

  describe(`${name} adapter: read`, () => {
    it('reads in a consumer group of its own that commits nothing and is deleted afterwards', async () => {
      const clientId = `read-${randomUUID()}`;
      const bus = await createKafkaBus({ brokers: testInfra().kafkaBrokers, clientId, replicationFactor: 1, logger });
      const admin = new Kafka({ clientId: 'read-admin', brokers: testInfra().kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
      admins.push(admin);
      try {
        const topic = `${prefix}read-no-group`;
        await bus.ensureTopics([{ topic, partitions: 2 }]);
        await bus.publish(topic, [
          { key: 'a', value: '1' },
          { key: 'b', value: '2' },
          { key: 'a', value: '3' },
        ]);
        expect((await bus.read(topic)).map((r) => r.value.toString()).sort()).toEqual(['1', '2', '3']);
        await admin.connect();
        const mine = (await admin.listGroups()).groups.filter((g) => g.groupId.startsWith(clientId));
        expect(mine).toEqual([]);
      } finally {
        await bus.close();
      }
    }, 60_000);
  });

  describe(`${name} adapter: topic settings`, () => {
    it("aligns retention without resetting the topic's other settings (AlterConfigs resets what it is not given)", async () => {
      const bus = await createKafkaBus({ brokers: testInfra().kafkaBrokers, clientId: 'align-configs', replicationFactor: 1, logger });
      const admin = new Kafka({ clientId: 'align-configs-admin', brokers: testInfra().kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
      admins.push(admin);
      try {
        await admin.connect();
        const topic = `${prefix}align-preserves`;
        // As an older Shopstream, or an operator, left it: finite retention, its own limits.
        await admin.createTopics({
          topics: [
            {
              topic,
              numPartitions: 1,
              configEntries: [
                { name: 'retention.ms', value: '86400000' },
                { name: 'max.message.bytes', value: '2097152' },
                { name: 'min.insync.replicas', value: '1' },
                { name: 'cleanup.policy', value: 'delete' },
              ],
            },
          ],
        });
        const own = async () => {
          const { resources } = await admin.describeConfigs({ includeSynonyms: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }] });
          return Object.fromEntries(
            resources[0].configEntries.filter((e) => e.configSource === ConfigSource.TOPIC_CONFIG).map((e) => [e.configName, e.configValue]),
          );
        };
        const changes = await bus.alignTopicConfigs([{ topic, partitions: 1, config: { 'retention.ms': '-1', 'retention.bytes': '-1' } }]);
        expect(changes).toEqual([
          { topic, name: 'retention.ms', from: '86400000', inherited: false, to: '-1' },
          { topic, name: 'retention.bytes', from: '-1', inherited: true, to: '-1' },
        ]);
        expect(await own()).toEqual({
          'retention.ms': '-1',
          'retention.bytes': '-1',
          'max.message.bytes': '2097152',
          'min.insync.replicas': '1',
          'cleanup.policy': 'delete',
        });
        expect(await bus.alignTopicConfigs([{ topic, partitions: 1, config: { 'retention.ms': '-1', 'retention.bytes': '-1' } }])).toEqual([]);
      } finally {
        await bus.close();
      }
    }, 60_000);
  });
}
