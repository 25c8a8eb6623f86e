import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase, dropTestDatabase, testInfra, uniquePrefix } from './index.js';
import { pollUntil } from './proc.js';

/** Proves the servers the run provides are real: each guarantee below needs a real broker or server. */
describe('testkit infrastructure', () => {
  const { kafkaBrokers, databaseUrl } = testInfra();
  const kafka = new Kafka({ clientId: 'testkit-spec', brokers: kafkaBrokers, logLevel: logLevel.WARN });
  const cleanups: Array<() => Promise<unknown>> = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('Kafka: creates a topic, takes an idempotent acks=-1 write and delivers it to a consumer group that commits', async () => {
    const topic = `${uniquePrefix()}records`;
    const admin = kafka.admin();
    await admin.connect();
    cleanups.push(() => admin.disconnect());
    // Not waitForLeaders: on KRaft kafkajs' own wait can fail with "does not host this topic-partition"
    // while the leaders are being elected (tulios/kafkajs#1563); poll the metadata instead.
    expect(await admin.createTopics({ topics: [{ topic, numPartitions: 2 }] })).toBe(true);
    await pollUntil(
      `leaders for ${topic}`,
      async () => {
        const { topics } = await admin.fetchTopicMetadata({ topics: [topic] });
        if (!topics[0]?.partitions.every((p) => p.leader >= 0) || topics[0].partitions.length !== 2) throw new Error('no leaders yet');
      },
      { timeoutMs: 30_000, intervalMs: 50 },
    );
    expect(await admin.listTopics()).toContain(topic);

    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
    await producer.connect();
    cleanups.push(() => producer.disconnect());
    const [ack] = await producer.send({
      topic,
      acks: -1,
      messages: [{ key: 'shop-1', value: JSON.stringify({ n: 1 }), headers: { schema: 'test.v1' } }],
    });
    expect(ack?.errorCode).toBe(0);

    const groupId = `${topic}.group`;
    const consumer = kafka.consumer({ groupId, allowAutoTopicCreation: false });
    await consumer.connect();
    cleanups.push(() => consumer.disconnect());
    await consumer.subscribe({ topic, fromBeginning: true });
    const received = await new Promise<{ key: string; value: string; schema: string; partition: number; offset: string }>((resolve, reject) => {
      consumer
        .run({
          autoCommit: false,
          eachMessage: async ({ partition, message }) => {
            const next = (BigInt(message.offset) + 1n).toString();
            await consumer.commitOffsets([{ topic, partition, offset: next }]);
            resolve({
              key: message.key?.toString() ?? '',
              value: message.value?.toString() ?? '',
              schema: message.headers?.schema?.toString() ?? '',
              partition,
              offset: message.offset,
            });
          },
        })
        .catch(reject);
    });
    expect(received).toMatchObject({ key: 'shop-1', value: '{"n":1}', schema: 'test.v1', partition: ack!.partition });
    await consumer.stop();

    // The commit is on the broker, not only in this client.
    const [committed] = await admin.fetchOffsets({ groupId, topics: [topic] });
    const forPartition = committed?.partitions.find((p) => p.partition === received.partition);
    expect(forPartition?.offset).toBe((BigInt(received.offset) + 1n).toString());
  });

  it('Kafka: the broker creates no topic on first use (auto-creation is off)', async () => {
    const topic = `${uniquePrefix()}never-created`;
    // The client asks for auto-creation; the broker must refuse it. Its retries would log errors: silence them.
    const quiet = new Kafka({ clientId: 'testkit-spec', brokers: kafkaBrokers, logLevel: logLevel.NOTHING });
    const producer = quiet.producer({ allowAutoTopicCreation: true, retry: { retries: 1 } });
    await producer.connect();
    cleanups.push(() => producer.disconnect());
    await expect(producer.send({ topic, acks: -1, messages: [{ value: 'x' }] })).rejects.toThrow();
    const admin = kafka.admin();
    await admin.connect();
    cleanups.push(() => admin.disconnect());
    expect(await admin.listTopics()).not.toContain(topic);
  });

  it('PostgreSQL: createTestDatabase makes an empty database of its own that takes SQL', async () => {
    const url = await createTestDatabase(databaseUrl);
    cleanups.push(() => dropTestDatabase(url));
    expect(new URL(url).pathname).toMatch(/^\/t_[0-9a-f]{32}$/);

    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows: tables } = await client.query(`SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'`);
      expect(tables[0].n).toBe(0);
      await client.query('CREATE TABLE t (id int PRIMARY KEY, body jsonb NOT NULL)');
      await client.query(`INSERT INTO t VALUES (1, '{"a": 1}'), (2, '{"a": 2}') ON CONFLICT (id) DO NOTHING`);
      const { rows } = await client.query(`SELECT sum((body->>'a')::int)::int AS s, current_database() AS db FROM t`);
      expect(rows[0]).toEqual({ s: 3, db: new URL(url).pathname.slice(1) });
      // Tagged with this run, so the run's teardown drops it even if a test forgets to.
      const { rows: tag } = await client.query(`SELECT shobj_description(oid, 'pg_database') AS c FROM pg_database WHERE datname = current_database()`);
      expect(tag[0].c).toMatch(/^shopstream-testkit run [0-9a-f-]{36}$/);
    } finally {
      await client.end();
    }
  });
});
