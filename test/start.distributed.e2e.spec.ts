import { readdirSync, readFileSync } from 'node:fs';
import { getPriority } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { testInfra } from '@shopstream/testkit';
import { killShopstreams } from './shopstreamProcess.js';
import { startShopstream, stopShopstream, runCli, api, conversationLines, distributedEnv, eventsFlowAndTimeline, exportedIdsOnceThere } from './startFlows.js';

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
    // As in the embedded mode, the consumers that projected those events ran in a worker thread (CONSUMER_THREAD=auto).
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

/** Every thread of `pid` and its descendants (Linux /proc): its name, nice value, and whether it is its process's first. */
function threadsUnder(pid: number): { comm: string; nice: number; main: boolean }[] {
  const stat = (file: string) => {
    try {
      const text = readFileSync(file, 'utf8');
      const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
      return { comm: text.slice(text.indexOf('(') + 1, text.lastIndexOf(')')), ppid: Number(rest[1]), nice: Number(rest[16]) };
    } catch {
      return null; // a process or thread that ended meanwhile
    }
  };
  const parents = new Map<number, number>();
  for (const p of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    const st = stat(`/proc/${p}/stat`);
    if (st) parents.set(Number(p), st.ppid);
  }
  const under = (p: number): boolean => p === pid || (parents.has(p) && p > 1 && under(parents.get(p)!));
  return [...parents.keys()].filter(under).flatMap((p) => {
    let tids: string[] = [];
    try {
      tids = readdirSync(`/proc/${p}/task`);
    } catch {
      // ended meanwhile
    }
    return tids.flatMap((tid) => {
      const st = stat(`/proc/${p}/task/${tid}/stat`);
      return st ? [{ comm: st.comm, nice: st.nice, main: Number(tid) === p }] : [];
    });
  });
}
