import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectPostgres, migrate, queryRow, sql, type Db } from '@shopstream/db';
import { createLogger } from '@shopstream/telemetry';
import { createTestDatabase, startLocalKafka, testInfra, uniquePrefix, waitFor, type KafkaHandle } from '@shopstream/testkit';
import { createKafkaBus, createPlatformaticKafkaBus } from '@shopstream/bus';
import { appendToOutbox, relayOutbox, startOutboxRelay } from './outbox.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const logger = createLogger('outbox-relay', process.env.TEST_LOG_LEVEL ?? 'silent');
const prefix = uniquePrefix();
let db: Db;

beforeAll(async () => {
  db = connectPostgres({ url: await createTestDatabase(testInfra().databaseUrl), poolSize: 3 });
  await migrate(db);
}, 120_000);
afterAll(async () => {
  await db?.close();
});

describe.each([
  ['kafkajs', createKafkaBus],
  ['@platformatic/kafka', createPlatformaticKafkaBus],
] as const)('outbox relay on %s', (name, createBus) => {
  it("relays a shop's records in order through a topic that takes less per send than the relay's rounds carry", async () => {
    const bus = await createBus({ brokers: testInfra().kafkaBrokers, clientId: `relay-${name}`, replicationFactor: 1, logger });
    try {
      const topic = `${prefix}relay-small-${name.replace(/\W/g, '')}`;
      // As an operator may create it: the broker's default limit (1 MiB), while a round of 5,000 rows of one
      // shop (one partition) is about 5 MiB.
      await bus.ensureTopics([{ topic, partitions: 3, config: { 'max.message.bytes': '1048588' } }]);
      const values = Array.from({ length: 5_000 }, (_, i) => `${i}:${'x'.repeat(1_000)}`);
      await db.tx((tx) =>
        appendToOutbox(
          tx,
          values.map((value) => ({ topic, key: 'shop-1', value, headers: { schema: 'test.v1' } })),
        ),
      );

      expect(await relayOutbox({ db, bus, topic })).toBe(5_000);

      const read = await bus.read(topic);
      expect(read.map((r) => r.value.toString())).toEqual(values);
      expect(read.every((r) => r.headers.schema === 'test.v1')).toBe(true);
      const left = await queryRow(db, sql`SELECT count(*)::int AS n FROM outbox WHERE topic = ${topic}`, (r) => Number(r.n));
      expect(left).toBe(0);
    } finally {
      await bus.close();
    }
  }, 120_000);
});

describe.each([
  ['kafkajs', createKafkaBus],
  ['@platformatic/kafka', createPlatformaticKafkaBus],
] as const)('outbox relay on %s against a broker that stalls (sends time out rather than fail)', (name, createBus) => {
  // A broker of its own: SIGSTOP on the shared one would stall every other spec file.
  let kafka: KafkaHandle;
  beforeAll(async () => {
    kafka = await startLocalKafka({});
  }, 240_000);
  afterAll(async () => {
    if (kafka?.pid) process.kill(kafka.pid, 'SIGCONT');
    await kafka?.stop();
  });

  it('sends the round in flight when the broker slowed twice at most (and a third of a round more), not the round again on every timeout', async () => {
    const pid = kafka.pid!;
    const bus = await createBus({ brokers: kafka.brokers, clientId: `relay-stall-${name}`, replicationFactor: 1, logger, publishTimeoutMs: 1_500 });
    const batchSize = 1_000;
    const rows = 20_000;
    const topic = `${prefix}relay-stall-${name.replace(/\W/g, '')}`;
    let failures = 0;
    const relay = startOutboxRelay({ db, bus, logger, topic, batchSize, intervalMs: 100 });
    // The relay that resent its whole round (1,000 rows) on every timeout doubled 5,000-6,000 rows over ten stalls
    // here; four keep that well above the bound below, and take 20 s less per adapter.
    const stalls = 4;
    let stalled = 0;
    try {
      await bus.ensureTopics([{ topic, partitions: 3 }]);
      // A connected producer, as a running relay has: the round in flight when the broker stops is on it.
      await bus.publish(topic, [{ key: 'warm-up', value: 'warm-up' }]);
      await db.tx((tx) =>
        appendToOutbox(
          tx,
          Array.from({ length: rows }, (_, i) => ({ topic, key: `shop-${i % 7}`, value: String(i) })),
        ),
      );
      // A slow broker: it stalls for longer than a send may take, runs a little, and stalls again. Sends time
      // out and land later, when it runs.
      const slow = (async () => {
        for (; stalled < stalls; stalled++) {
          process.kill(pid, 'SIGSTOP');
          await sleep(2_500);
          process.kill(pid, 'SIGCONT');
          await sleep(700);
        }
      })();
      // Kicked as a projector does after each commit.
      while (stalled < stalls)
        await relay.relay().then(
          () => sleep(50),
          () => void failures++,
        );
      await slow;
      await waitFor(
        async () =>
          (await relay.relay().catch(() => -1)) === 0 &&
          (await queryRow(db, sql`SELECT count(*)::int AS n FROM outbox WHERE topic = ${topic}`, (r) => Number(r.n))) === 0,
        { timeoutMs: 120_000, intervalMs: 500, message: 'the outbox relayed once the broker answers again' },
      );

      const values = (await bus.read(topic)).map((r) => r.value.toString()).filter((v) => v !== 'warm-up');
      expect(new Set(values).size).toBe(rows);
      // Duplicates: the round that timed out on the connected producer (the broker wrote it on waking), rounds
      // each at most a quarter of the one that timed out before, and a row per timed-out probe. Not a round
      // again on every timeout.
      expect(values.length - rows).toBeLessThanOrEqual(Math.floor((batchSize * 4) / 3) + failures);
    } finally {
      stalled = stalls;
      process.kill(pid, 'SIGCONT');
      await relay.stop();
      await bus.close();
    }
  }, 240_000);
});
