import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exitOf, waitFor } from '@shopstream/harness';
import { killShopstreams, repo, spawnShopstream, startBanner } from './shopstreamProcess.js';

// The image's command line on the image's Node: `pnpm build`, then the Dockerfile's ENTRYPOINT exactly as it
// is written, run by Node 24 LTS (engines still admits 20, which this suite itself may run on). Node 24 comes
// from the npm registry's `node` package, cached by npx in ~/.npm after the first run.
const exec = promisify(execFile);
const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(readFileSync(path.join(repo, 'Dockerfile'), 'utf8'))![1]!) as string[];
let node24: string;

beforeAll(async () => {
  // The same build the image's build stage runs (`pnpm build`); incremental when dist/ is current.
  await exec(path.join(repo, 'node_modules/.bin/tsc'), ['-b', 'tsconfig.build.json'], { cwd: repo, timeout: 240_000 });
  const { stdout } = await exec('npx', ['-y', 'node@24', '-p', 'process.execPath'], { cwd: tmpdir(), timeout: 240_000 });
  node24 = stdout.trim().split('\n').pop()!;
}, 300_000);

afterAll(killShopstreams);

describe('the built image command on Node 24 LTS', () => {
  it('is node on compiled JS, with the workspace packages resolved to their dist/', async () => {
    expect((await exec(node24, ['--version'])).stdout).toMatch(/^v24\./);
    expect(entrypoint[0]).toBe('node');
    expect(entrypoint[1]).toMatch(/\/dist\/main\.js$/);
    // No condition given: what a built service imports is the compiled JS, never a .ts source.
    const { stdout } = await exec(node24, ['--input-type=module', '-e', "console.log(import.meta.resolve('@shopstream/runtime'))"], {
      cwd: path.join(repo, 'services/all-in-one'),
    });
    expect(stdout.trim()).toMatch(/\/packages\/runtime\/dist\/index\.js$/);
  });

  it('starts embedded, records an event whose Activity is readable, and drains on SIGTERM with exit 0', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-node24-'));
    chmodSync(dir, 0o755); // as root, the embedded PostgreSQL runs as another OS user, who must enter it
    try {
      const server = spawnShopstream([node24, ...entrypoint.slice(1)], { NODE_ENV: 'production', LOG_LEVEL: 'info', DATA_DIR: path.join(dir, '.data') });
      const base = await startBanner(server);
      expect(server.output()).toMatch(/embedded mode, data in \S+, PostgreSQL/);
      const key = /API key: +(\S+)/.exec(server.output())![1];
      const shop = /Shop id: +(\S+)/.exec(server.output())![1];
      const headers = { authorization: `Bearer ${key}`, 'x-shop-id': shop };
      const email = `node24-${Date.now()}@example.com`;
      const res = await fetch(`${base}/v2026-04/events/`, {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'Placed order', metric: { metric_name: 'placed_order', value: 42 }, contact: { email } }),
      });
      const ev = (await res.json()) as { activity_id: string };
      expect(res.status, JSON.stringify(ev)).toBe(202);
      const activity = await waitFor(
        async () => {
          const r = await fetch(`${base}/v2026-04/activities/${ev.activity_id}/`, { headers });
          return r.status === 200 ? ((await r.json()) as { id: string; contact: { email: string } }) : undefined;
        },
        { timeoutMs: 30_000, message: 'the activity' },
      );
      expect(activity).toMatchObject({ id: ev.activity_id, contact: { email } });
      // What the image's HEALTHCHECK asks.
      expect((await fetch(`${base}/healthz`)).status).toBe(200);

      server.child.kill('SIGTERM');
      const exit = await exitOf(server.child, { timeoutMs: 30_000, message: 'exit after SIGTERM' });
      expect({ ...exit, out: server.output().slice(-2000) }).toMatchObject({ code: 0, signal: null });
      expect(server.output()).toContain('"msg":"stopping: draining requests and work in hand"');
      expect(server.output()).toContain('"msg":"stopped"');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);
});
