import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { exitOf, waitFor } from '@shopstream/harness';
import { killShopstreams, spawnShopstream } from './shopstreamProcess.js';
import { entrypoint, startShopstream, stopShopstream, runCli, api, conversationLines, eventsFlowAndTimeline, exportedIdsOnceThere } from './startFlows.js';

afterAll(killShopstreams);

describe('pnpm start, embedded on PGlite', () => {
  it('on PGlite (EMBEDDED_DB=pglite), refuses CLI commands while the server holds the data directory, and takes them once it stopped', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-pglite-'));
    const env = { DATA_DIR: path.join(dir, '.data'), EMBEDDED_DB: 'pglite', FLOW_REFRESH_MS: '500' };
    try {
      let s = await startShopstream(env);
      const key = /API key: +(\S+)/.exec(s.output())![1];
      const shop = /Shop id: +(\S+)/.exec(s.output())![1];
      let call = api(s.base, key, shop);
      const { activityId } = await eventsFlowAndTimeline(s.base, call);

      const { file, ids } = conversationLines(shop, 3);
      const refused = await runCli(['conversations', 'import', file], env);
      expect(refused.code).not.toBe(0);
      expect(refused.out).toMatch(/held by process \d+/);
      const busy = await runCli(['projections', 'rebuild', 'activity-projector', '--yes'], env);
      expect(busy.code).toBe(2);
      expect(busy.out).toMatch(/held by process \d+/);

      expect(await stopShopstream(s)).toBe(0);
      const imported = await runCli(['conversations', 'import', file], env);
      expect({ code: imported.code, out: imported.out }).toMatchObject({ code: 0 });
      const rebuilt = await runCli(['projections', 'rebuild', 'activity-projector', '--yes'], env);
      expect(rebuilt.code).toBe(0);
      s = await startShopstream(env);
      call = api(s.base, key, shop);
      expect(await exportedIdsOnceThere(call, ids.length)).toEqual(ids);
      expect((await call('GET', `/activities/${activityId}/`)).status).toBe(200);
      expect(await stopShopstream(s)).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);
});

describe('a signal during start-up', () => {
  it('is held until the service is up, then it stops drained and exits 0 (it used to kill the process mid-start)', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-early-signal-'));
    const dataDir = path.join(dir, '.data');
    try {
      const { child, output } = spawnShopstream(entrypoint, { LOG_LEVEL: 'info', DATA_DIR: dataDir });
      // The data directory's lock is taken while the runtime opens: start-up is under way, handlers installed.
      await waitFor(() => existsSync(path.join(dataDir, 'shopstream.lock')) || undefined, {
        timeoutMs: 60_000,
        intervalMs: 20,
        message: 'the data directory lock',
      });
      child.kill('SIGTERM');
      const code = await exitOf(child, { timeoutMs: 60_000, message: 'exit after SIGTERM' });
      expect({ ...code, out: output().slice(-2000) }).toMatchObject({ code: 0, signal: null });
      expect(output()).toContain('SIGTERM during start-up');
      expect(output()).toContain('"msg":"stopped"');
      expect(existsSync(path.join(dataDir, 'shopstream.lock'))).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
