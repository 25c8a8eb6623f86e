import path from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, describe, expect, it } from 'vitest';
import { connectPostgres, sql } from '@shopstream/db';
import { createTestDatabase, testInfra, uniquePrefix } from '@shopstream/testkit';
import { exitOf, waitFor } from '@shopstream/harness';
import { killShopstreams, repo, spawnShopstream } from './shopstreamProcess.js';
import { pingsTopic } from './fixtures/tally-service/service.js';

// "Adding a projection or a topic touches its own service package and nothing else": a throw-away service
// (test/fixtures/tally-service: its declaration, its topics, its migration, its main.ts) run by the same runner
// as every service, on the real broker and PostgreSQL. Nothing outside its folder names it.
afterAll(killShopstreams);

describe('a projection service declared in its own folder alone', () => {
  it('gets its migration applied, its topics created, and its records applied and emitted, through runServices', async () => {
    const prefix = uniquePrefix();
    const databaseUrl = await createTestDatabase(testInfra().databaseUrl);
    const brokers = testInfra().kafkaBrokers;
    const s = spawnShopstream(
      [process.execPath, '--conditions=@shopstream/source', '--import', 'tsx', path.join(repo, 'test/fixtures/tally-service/main.ts')],
      {
        DATABASE_URL: databaseUrl,
        KAFKA_BROKERS: brokers.join(','),
        TOPIC_PREFIX: prefix,
        KAFKA_PARTITIONS: '2',
        LOG_LEVEL: 'info',
      },
    );
    const db = connectPostgres({ url: databaseUrl, poolSize: 2 });
    const kafka = new Kafka({ clientId: 'throwaway-spec', brokers, logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    const producer = kafka.producer();
    try {
      // The port listens once the runner opened the runtime (migrations applied, topics created); its consumer
      // group reads its topic from the start, so records sent before it joined are applied too.
      await waitFor(
        () => {
          if (s.child.exitCode !== null) throw new Error(`the tally service exited ${s.child.exitCode}:\n${s.output()}`);
          return s.output().includes('"msg":"listening"');
        },
        { timeoutMs: 120_000, message: 'the tally service started' },
      );
      const migrated = await db.query(sql`SELECT name FROM schema_migrations WHERE name = '900_tally.sql'`);
      expect(migrated).toHaveLength(1);

      await admin.connect();
      const names = await admin.listTopics();
      for (const t of ['tally-pings', 'tally-counts', 'tally-pings.dlq', 'tally-counts.dlq']) expect(names).toContain(`${prefix}${t}`);

      await producer.connect();
      const shop = '6b1f0b0e-8a54-4c55-9d5e-1d5a3c2b1a00';
      await producer.send({
        topic: `${prefix}tally-pings`,
        messages: [1, 2, 3, 4, 5].map((n) => pingsTopic.record({ shop_id: shop, n })),
      });
      await waitFor(async () => Number((await db.query(sql`SELECT count(*)::int AS n FROM tally_pings`))[0].n) === 5, {
        timeoutMs: 60_000,
        message: 'five pings applied',
      });
      // What it emits went through the outbox to its own derived topic.
      await waitFor(async () => (await admin.fetchTopicOffsets(`${prefix}tally-counts`)).reduce((sum, p) => sum + Number(p.high), 0) === 5, {
        timeoutMs: 60_000,
        message: 'five counts emitted',
      });
      s.child.kill('SIGTERM');
      const { code } = await exitOf(s.child, { timeoutMs: 60_000, message: 'the tally service exits' });
      expect(code, s.output()).toBe(0);
    } finally {
      await producer.disconnect().catch(() => {});
      await admin.disconnect().catch(() => {});
      await db.close();
    }
  }, 300_000);
});
