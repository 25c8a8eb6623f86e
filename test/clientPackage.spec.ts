import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { createTestShop, startTestRuntime, startTestServer, type TestServer } from '@shopstream/harness';

/**
 * @shopstream/client as a user gets it: `pnpm pack` (which builds it), the tarball installed ALONE in an empty
 * directory with `npm install --offline` (so it has no dependency to fetch, published or not), then a consumer
 * in TypeScript from ESM and from CommonJS, compiled under `tsc --strict` with node16/nodenext and bundler
 * resolution, and run: each records an event on a real server. `attw` (arethetypeswrong) finds no problem.
 */
const run = promisify(execFile);
const repo = path.resolve(import.meta.dirname, '..');
const tsc = path.join(repo, 'node_modules/.bin/tsc');
const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-client-pack-'));
const consumer = path.join(dir, 'consumer');
let tarball: string;
let rt: Runtime;
let server: TestServer;

beforeAll(async () => {
  rt = await startTestRuntime({}, 'client-package');
  server = await startTestServer(rt, [await startIngestApi(rt)]);
  await run('pnpm', ['pack', '--pack-destination', dir], { cwd: path.join(repo, 'packages/client'), timeout: 180_000 });
  tarball = path.join(
    dir,
    readdirSync(dir).find((f) => f.endsWith('.tgz'))!,
  );
  await run('mkdir', [consumer]);
  writeFileSync(path.join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', private: true }));
  await run('npm', ['install', tarball, '--offline', '--no-audit', '--no-fund', '--no-package-lock'], { cwd: consumer, timeout: 180_000 });
}, 240_000);
afterAll(async () => {
  await server?.stop();
  await rt?.close();
  rmSync(dir, { recursive: true, force: true });
});

it('the tarball has no dependency: nothing but the client is installed', () => {
  const manifest = JSON.parse(readFileSync(path.join(consumer, 'node_modules/@shopstream/client/package.json'), 'utf8')) as Record<string, unknown>;
  expect(manifest.dependencies).toBeUndefined();
  expect(manifest.peerDependencies).toBeUndefined();
  expect(readdirSync(path.join(consumer, 'node_modules')).filter((f) => !f.startsWith('.'))).toEqual(['@shopstream']);
  expect(readdirSync(path.join(consumer, 'node_modules/@shopstream'))).toEqual(['client']);
});

// Uses the types a user relies on: the options, a narrowed bulk result, a numeric export limit, the error classes.
const usage = (importLine: string) => `${importLine}
const client = new ShopstreamClient({ baseUrl: process.env.BASE_URL!, apiKey: process.env.KEY!, shopId: process.env.SHOP!, timeoutMs: 5_000, maxQueueSize: 100, onDrop: (e: EventInput) => console.error(e.name) });
const event: EventInput = { name: 'Placed order', metric: { metric_name: 'placed_order', value: 42 } };
export const filters: ExportParams = { created_at__range: 'relative:-7d,', limit: 10 };
async function main(): Promise<void> {
  const accepted = await client.recordEvent(event, { timeoutMs: 5_000 });
  const results: BulkResultItem[] = await client.recordEvents([event]);
  const ids = results.flatMap((r) => (r.status === 'success' ? [r.event.activity_id] : [r.error.code]));
  const failure: unknown = await client.recordEvent({ name: 'x', metric: { metric_name: '' } }).catch((e: unknown) => e);
  const code = failure instanceof ShopstreamError ? failure.code : failure instanceof ShopstreamTimeoutError ? 'timeout' : 'other';
  await client.close({ timeoutMs: 5_000 });
  console.log(JSON.stringify({ accepted: accepted.activity_id.length, ids: ids.length, code }));
}
void main();
declare const process: { env: Record<string, string | undefined> };
`;

it.each([
  {
    lane: 'ESM, nodenext',
    file: 'esm.mts',
    out: 'esm.mjs',
    source: usage(
      "import { ShopstreamClient, ShopstreamError, ShopstreamTimeoutError, type BulkResultItem, type EventInput, type ExportParams } from '@shopstream/client';",
    ),
    flags: ['--module', 'nodenext', '--moduleResolution', 'nodenext'],
  },
  {
    lane: 'CommonJS, node16',
    file: 'cjs.cts',
    out: 'cjs.cjs',
    source: usage(
      "import { ShopstreamClient, ShopstreamError, ShopstreamTimeoutError, type BulkResultItem, type EventInput, type ExportParams } from '@shopstream/client';",
    ),
    flags: ['--module', 'node16', '--moduleResolution', 'node16'],
  },
  {
    lane: 'CommonJS with require(), node16',
    file: 'require.cts',
    out: 'require.cjs',
    source: usage(
      "import shopstream = require('@shopstream/client');\nconst { ShopstreamClient, ShopstreamError, ShopstreamTimeoutError } = shopstream;\ntype BulkResultItem = shopstream.BulkResultItem; type EventInput = shopstream.EventInput; type ExportParams = shopstream.ExportParams;",
    ),
    flags: ['--module', 'node16', '--moduleResolution', 'node16'],
  },
])(
  '$lane: compiles under tsc --strict and records an event on the server',
  async ({ file, out, source, flags }) => {
    writeFileSync(path.join(consumer, file), source);
    const compiled = await run(tsc, ['--strict', '--target', 'es2022', '--lib', 'es2022,dom', '--skipLibCheck', 'false', '--outDir', 'out', ...flags, file], {
      cwd: consumer,
      timeout: 120_000,
    }).catch((e: { stdout?: string }) => ({ stdout: e.stdout ?? 'failed' }));
    expect(compiled.stdout).toBe('');
    const shop = await createTestShop(rt);
    const { stdout } = await run('node', [path.join('out', out)], {
      cwd: consumer,
      env: { ...process.env, BASE_URL: server.baseUrl, KEY: shop.key, SHOP: shop.shopId },
      timeout: 60_000,
    });
    expect(JSON.parse(stdout)).toEqual({ accepted: 36, ids: 1, code: 'validation_error' });
  },
  180_000,
);

it('bundler resolution (moduleResolution bundler, module esnext) finds the types too', async () => {
  writeFileSync(
    path.join(consumer, 'bundled.ts'),
    "import { ShopstreamClient, type EventInput } from '@shopstream/client';\nexport const e: EventInput = { name: 'n', metric: { metric_name: 'm' } };\nexport const c = new ShopstreamClient({ baseUrl: 'http://x', apiKey: 'k', shopId: 's' });\n",
  );
  const compiled = await run(
    tsc,
    ['--strict', '--noEmit', '--target', 'es2022', '--lib', 'es2022,dom', '--module', 'esnext', '--moduleResolution', 'bundler', 'bundled.ts'],
    { cwd: consumer, timeout: 120_000 },
  ).catch((e: { stdout?: string }) => ({ stdout: e.stdout ?? 'failed' }));
  expect(compiled.stdout).toBe('');
}, 180_000);

it('arethetypeswrong finds no problem in the tarball (node10, node16 from CJS and ESM, bundler)', async () => {
  const out = await run(path.join(repo, 'test/node_modules/.bin/attw'), [tarball, '--format', 'json'], { timeout: 120_000 }).catch(
    (e: { stdout?: string }) => ({ stdout: e.stdout ?? '' }),
  );
  const report = JSON.parse(out.stdout) as { analysis: { problems: unknown[] } };
  expect(report.analysis.problems).toEqual([]);
}, 180_000);
