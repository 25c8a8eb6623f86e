import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase, testInfra, uniquePrefix } from '@shopstream/testkit';
import { killShopstreams } from './shopstreamProcess.js';
import { startShopstream, stopShopstream, runCli, api, conversationLines, eventsFlowAndTimeline, exportedIdsOnceThere } from './startFlows.js';

afterAll(killShopstreams);

describe('pnpm start, distributed (KAFKA_BROKERS and DATABASE_URL set)', () => {
  it('runs the same flow on Kafka and PostgreSQL', async () => {
    const { kafkaBrokers, databaseUrl } = testInfra();
    const shop = randomUUID();
    const key = `e2e-${randomUUID()}`;
    const env = {
      KAFKA_BROKERS: kafkaBrokers.join(','),
      DATABASE_URL: await createTestDatabase(databaseUrl),
      TOPIC_PREFIX: uniquePrefix(),
      KAFKA_PARTITIONS: '3',
      BOOTSTRAP_API_KEYS: `${key}=${shop}`,
      FLOW_REFRESH_MS: '500',
      CONSUMER_GROUP_PREFIX: `${randomUUID()}.`,
      // For the line that says where the consumers run.
      LOG_LEVEL: 'info',
    };
    // Every service, as the image runs with no command given: stopped with SIGTERM below.
    const s = await startShopstream(env);
    expect(s.output()).toContain('distributed mode');
    expect(s.output()).not.toContain('API key:');
    const call = api(s.base, key, shop);
    await eventsFlowAndTimeline(s.base, call);
    // As in the embedded mode, the consumers that projected those events ran in a worker thread (CONSUMER_THREAD=auto).
    expect(s.output()).toContain('consumers started in a worker thread');
    // On a server the CLI works beside the running services.
    const { file, ids } = conversationLines(shop, 3);
    const imported = await runCli(['conversations', 'import', file], env);
    expect(imported.code).toBe(0);
    expect(await exportedIdsOnceThere(call, ids.length)).toEqual(ids);
    expect(await stopShopstream(s)).toBe(0);
  }, 300_000);
});
