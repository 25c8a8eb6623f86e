import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { exitOf, waitFor } from '@shopstream/harness';
import { killShopstreams, spawnShopstream } from './shopstreamProcess.js';
import {
  entrypoint,
  startShopstream,
  stopShopstream,
  runCli,
  api,
  conversationLines,
  eventsFlowAndTimeline,
  exportedIds,
  exportedIdsOnceThere,
  postgresProcesses,
  threadsUnder,
} from './startFlows.js';

afterAll(killShopstreams);

// `pnpm start` as a user runs it, embedded: a child process, real HTTP, nothing shared with the test but the data
// directory. PGlite and a signal during start-up: start.pglite.e2e.spec.ts; distributed: start.distributed.e2e.spec.ts.
describe('pnpm start, embedded (nothing but Node)', () => {
  it('prints a key that records events, triggers flows, exports imported conversations, and keeps it all over a restart', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-embedded-'));
    // As root, PostgreSQL runs as another OS user, who must be able to enter the directory (mkdtemp's is private).
    chmodSync(dir, 0o755);
    // CONSUMER_THREAD_NICE: a value nothing else here runs at, so a consumer thread would be found by it.
    const env = { DATA_DIR: path.join(dir, '.data'), FLOW_REFRESH_MS: '500', CONSUMER_THREAD_NICE: '7' };
    try {
      let s = await startShopstream(env);
      expect(s.output()).toMatch(/embedded mode, data in \S+, PostgreSQL/);
      const key = /API key: +(\S+)/.exec(s.output())![1];
      const shop = /Shop id: +(\S+)/.exec(s.output())![1];
      let call = api(s.base, key, shop);
      const { activityId, contactId } = await eventsFlowAndTimeline(s.base, call);
      // The consumers that projected those events ran on the event loop (CONSUMER_THREAD=auto on the Postgres-log
      // bus), not in a worker thread at CONSUMER_THREAD_NICE.
      if (process.platform === 'linux') expect(threadsUnder(s.child.pid!).filter((t) => t.nice === 7)).toEqual([]);

      // CLI commands work while the server runs, against its data: they attach to its PostgreSQL.
      const { file, ids } = conversationLines(shop, 3);
      const imported = await runCli(['conversations', 'import', file], env);
      expect({ code: imported.code, out: imported.out }).toMatchObject({ code: 0 });
      expect(await exportedIdsOnceThere(call, ids.length)).toEqual(ids);
      const created = await runCli(['api-keys', 'create', '--shop', shop, '--name', 'second'], env);
      expect(created.code).toBe(0);
      const secondKey = /ssk_\S+/.exec(created.out)![0];
      expect((await api(s.base, secondKey, shop)('GET', `/activities/${activityId}/`)).status).toBe(200);
      const rebuilt = await runCli(['projections', 'rebuild', 'activity-projector', '--yes'], env);
      expect({ code: rebuilt.code, out: rebuilt.out }).toMatchObject({
        code: 0,
        out: expect.stringMatching(/Rebuilt activity-projector: \d+ records applied/),
      });
      expect((await call('GET', `/activities/${activityId}/`)).status).toBe(200);

      // One server per data directory: a second one says so and exits 1 at once, without retrying (it used to wait
      // out STARTUP_TIMEOUT_MS, 2 minutes; the test's own limit says it no longer does).
      const second = spawnShopstream(entrypoint, { LOG_LEVEL: 'warn', ...env, STARTUP_TIMEOUT_MS: '900000' });
      const secondCode = await exitOf(second.child, { timeoutMs: 120_000, message: 'the second server to exit' });
      expect(secondCode).toMatchObject({ code: 1 });
      expect(second.output()).toMatch(/held by process \d+, a running Shopstream server/);
      expect(second.output()).not.toMatch(/trying again/);

      expect(await stopShopstream(s)).toBe(0);
      expect(postgresProcesses(env.DATA_DIR)).toEqual([]);
      s = await startShopstream(env);
      expect(/API key: +(\S+)/.exec(s.output())![1]).toBe(key);
      call = api(s.base, key, shop);
      // Still there after the restart.
      expect((await call('GET', `/activities/${activityId}/`)).status).toBe(200);
      expect((await call('GET', `/contacts/${contactId}/timeline/`)).body.results).toHaveLength(1);
      expect(await exportedIds(call)).toEqual(ids);

      // kill -9 of the service: every accepted event survives, and the next start adopts the PostgreSQL left
      // running (no second server, none left over once it stops).
      const accepted: string[] = [];
      for (let i = 0; i < 20; i++) {
        const r = await call('POST', '/events/', { name: `Viewed ${i}`, metric: { metric_name: 'viewed', value: i }, remote_id: `kill-${i}` });
        expect(r.status).toBe(202);
        accepted.push(r.body.activity_id);
      }
      s.child.kill('SIGKILL');
      await waitFor(() => s.child.exitCode !== null || s.child.signalCode !== null, { timeoutMs: 60_000, message: 'the killed process' });
      const orphans = postgresProcesses(env.DATA_DIR);
      expect(orphans.length).toBeGreaterThan(0);
      s = await startShopstream(env);
      expect(s.output()).not.toMatch(/error/i);
      call = api(s.base, key, shop);
      for (const id of accepted) {
        await waitFor(async () => (await call('GET', `/activities/${id}/`)).status === 200, { timeoutMs: 30_000, message: `activity ${id}` });
      }
      expect(postgresProcesses(env.DATA_DIR).sort()).toEqual(orphans.sort());
      expect(await stopShopstream(s)).toBe(0);
      expect(postgresProcesses(env.DATA_DIR)).toEqual([]);
    } finally {
      for (const pid of postgresProcesses(dir)) process.kill(pid, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);
});
