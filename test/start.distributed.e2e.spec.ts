import { getPriority } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { testInfra } from '@shopstream/testkit';
import { killShopstreams } from './shopstreamProcess.js';
import {
  startShopstream,
  stopShopstream,
  runCli,
  api,
  conversationLines,
  distributedEnv,
  eventsFlowAndTimeline,
  exportedIdsOnceThere,
  threadsUnder,
} from './startFlows.js';

afterAll(killShopstreams);

describe('pnpm start, distributed (KAFKA_BROKERS and DATABASE_URL set)', () => {
  it('runs the same flow on Kafka and PostgreSQL', async () => {
    const { shop, key, env } = await distributedEnv(
      { KAFKA_BROKERS: testInfra().kafkaBrokers.join(',') },
      // A value nothing else here runs at, to find the consumer thread by it.
      { CONSUMER_THREAD_NICE: '7' },
    );
    // Every service, as the image runs with no command given: stopped with SIGTERM below.
    const s = await startShopstream(env);
    expect(s.output()).toContain('distributed mode');
    expect(s.output()).not.toContain('API key:');
    const call = api(s.base, key, shop);
    await eventsFlowAndTimeline(s.base, call);
    // On Kafka the consumers that projected those events ran in a worker thread (CONSUMER_THREAD=auto; the embedded
    // mode keeps them on the event loop: start.e2e.spec.ts).
    expect(s.output()).toContain('consumers started in a worker thread');
    // That thread alone runs at CONSUMER_THREAD_NICE; the thread answering HTTP keeps the priority it was started
    // with (this process's).
    if (process.platform === 'linux') {
      const threads = threadsUnder(s.child.pid!);
      expect(threads.filter((t) => t.nice === 7)).toHaveLength(1);
      expect(threads.filter((t) => t.main && t.comm === 'node').map((t) => t.nice)).toContain(getPriority());
    }
    // On a server the CLI works beside the running services.
    const { file, ids } = conversationLines(shop, 3);
    const imported = await runCli(['conversations', 'import', file], env);
    expect(imported.code).toBe(0);
    expect(await exportedIdsOnceThere(call, ids.length)).toEqual(ids);
    expect(await stopShopstream(s)).toBe(0);
  }, 300_000);
});
