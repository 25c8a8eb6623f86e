import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connectPostgres, migrate, queryRow, sql, type Db } from '@shopstream/db';
import { createLogger } from '@shopstream/telemetry';
import { createTestDatabase, testInfra, uniquePrefix, waitFor } from '@shopstream/testkit';
import { createPlatformaticKafkaBus, topicNames, type Bus } from '@shopstream/bus';
import { runLiveProjection, type ProjectionDefinition } from './projection.js';

// A consumer whose prepared statement the server refuses after a migration changed what it returns ("cached
// plan must not change result type", SQLSTATE 0A000: packages/db/src/preparedStatements.ts). The batch fails
// once, is delivered again and applies under the statement's new name; nothing goes to the dead-letter topic.
describe('a projection whose prepared statement a migration outdated', () => {
  const prefix = uniquePrefix();
  const topic = `${prefix}probe`;
  const logger = createLogger('prepared-redelivery', process.env.TEST_LOG_LEVEL ?? 'silent');
  let db: Db;
  let bus: Bus;
  beforeAll(async () => {
    // One connection: every batch meets the session that prepared the statement.
    db = connectPostgres({ url: await createTestDatabase(testInfra().databaseUrl), poolSize: 1 });
    await migrate(db);
    await db.query(sql`CREATE TABLE probe_source (id integer PRIMARY KEY, label text NOT NULL)`);
    await db.query(sql`CREATE TABLE probe_applied (n integer PRIMARY KEY, label text NOT NULL)`);
    await db.query(sql`INSERT INTO probe_source VALUES (1, 'one')`);
    bus = await createPlatformaticKafkaBus({ brokers: testInfra().kafkaBrokers, clientId: 'prepared-redelivery', replicationFactor: 1, logger });
    await bus.ensureTopics([
      { topic, partitions: 1 },
      { topic: `${topic}.dlq`, partitions: 1 },
    ]);
  }, 120_000);
  afterAll(async () => {
    await bus?.close();
    await db?.close();
  });

  it('fails the batch once, applies it when it is delivered again, and dead-letters nothing', async () => {
    const def: ProjectionDefinition<{ shop_id: string; n: number }> = {
      name: 'probe',
      version: 1,
      summary: 'reads probe_source by a statement that selects every column',
      source: () => topic,
      emits: () => [],
      schema: z.object({ shop_id: z.string(), n: z.number().int() }),
      tables: ['probe_applied'],
      open: async () => ({
        async apply(tx, records) {
          for (const { value } of records) {
            const [row] = await tx.query(sql`SELECT * FROM probe_source WHERE id = ${1}`);
            await tx.query(sql`INSERT INTO probe_applied VALUES (${value.n}, ${String(row.label)}) ON CONFLICT DO NOTHING`);
          }
          return [];
        },
      }),
    };
    const projection = await runLiveProjection(def, { bus, db, logger, topics: topicNames(''), groupPrefix: prefix, lagIntervalMs: 0 });
    try {
      const send = (n: number) => bus.publish(topic, [{ key: 'shop', value: JSON.stringify({ shop_id: 'shop', n }), headers: {} }]);
      const applied = () => queryRow(db, sql`SELECT count(*)::int AS n FROM probe_applied`, (r) => Number(r.n));
      // Enough batches for the statement to be prepared in the session (its second run names it).
      for (let n = 1; n <= 4; n++) {
        await send(n);
        await waitFor(async () => (await applied()) === n, { timeoutMs: 60_000, message: `record ${n} applied` });
      }
      // The session's prepared statements of the projection's read (poolSize 1: the projection's session).
      const preparedNames = async () =>
        (await db.query(sql`SELECT name FROM pg_prepared_statements WHERE statement LIKE 'SELECT * FROM probe_source%'`)).map((r) => String(r.name));
      const before = await preparedNames();
      expect(before).toHaveLength(1);

      await db.query(sql`ALTER TABLE probe_source ADD COLUMN added integer`);
      await send(5);
      await waitFor(async () => (await applied()) === 5, { timeoutMs: 90_000, message: 'record 5 applied after the migration' });

      // The server refused the statement prepared before the migration (so this test ran that path): it was
      // prepared again under a new name, which only a refusal gives it.
      const after = await preparedNames();
      expect(after.filter((name) => name !== before[0])).toHaveLength(1);
      expect(await db.query(sql`SELECT n, label FROM probe_applied ORDER BY n`)).toEqual([1, 2, 3, 4, 5].map((n) => ({ n, label: 'one' })));
      expect(await bus.read(`${topic}.dlq`)).toEqual([]);
      expect(projection.applied).toBe(5);
    } finally {
      await projection.stop();
    }
  }, 240_000);
});
