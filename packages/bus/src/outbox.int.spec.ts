import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectPostgres, migrate, queryRow, sql, type Db } from '@shopstream/db';
import { createLogger } from '@shopstream/telemetry';
import { createTestDatabase, testInfra, uniquePrefix } from '@shopstream/testkit';
import { createKafkaBus } from './kafka.js';
import { createPlatformaticKafkaBus } from './kafkaPlatformatic.js';
import { appendToOutbox, relayOutbox } from './outbox.js';

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
