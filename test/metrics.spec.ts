import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';

import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startQueryApi } from '@shopstream/query-api';
import { ensurePromtool } from '@shopstream/testkit';
import { createTestShop, startTestRuntime, startTestServer, type TestServer } from '@shopstream/harness';

/**
 * /metrics as operators read it: one `route` label per endpoint, its template, whatever the answer (a 401
 * or a 415 from a middleware, a 404 of a known route used to be counted as `unmatched` or `/events/`), and an
 * exposition `promtool check metrics` accepts whole.
 */
let rt: Runtime;
let server: TestServer;
beforeAll(async () => {
  rt = await startTestRuntime({}, 'metrics');
  server = await startTestServer(rt, [await startIngestApi(rt), await startQueryApi(rt)]);
});
afterAll(async () => {
  await server?.stop();
  await rt?.close();
});

/** The statuses counted per (method, route), from shopstream_http_requests_total. */
async function counted(): Promise<Map<string, Set<string>>> {
  const text = await (await fetch(`${server.baseUrl}/metrics`)).text();
  const out = new Map<string, Set<string>>();
  for (const m of text.matchAll(/^shopstream_http_requests_total\{(.*)\} \S+$/gm)) {
    const labels = Object.fromEntries([...m[1].matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
    const key = `${labels.method} ${labels.route}`;
    if (!out.has(key)) out.set(key, new Set());
    out.get(key)!.add(labels.status);
  }
  return out;
}

it('labels every answer of an endpoint with its route template, 401, 403, 404 and 415 included', async () => {
  const shop = await createTestShop(rt);
  const other = await createTestShop(rt);
  const post = (headers: Record<string, string>, body = '{"name": "n", "metric": {"metric_name": "m"}}') =>
    fetch(`${server.baseUrl}/v2026-04/events/`, { method: 'POST', headers, body }).then((r) => r.status);
  expect(await post({ ...shop.headers, 'content-type': 'application/json' })).toBe(202);
  expect(await post({ 'content-type': 'application/json' })).toBe(401);
  expect(await post({ ...shop.headers, 'x-shop-id': other.shopId, 'content-type': 'application/json' })).toBe(403);
  expect(await post({ ...shop.headers, 'content-type': 'text/plain' })).toBe(415);
  const get = (p: string) => fetch(`${server.baseUrl}${p}`, { headers: shop.headers }).then((r) => r.status);
  expect(await get(`/v2026-04/flows/${randomUUID()}/`)).toBe(404);
  expect(await get(`/v2026-04/activities/${randomUUID()}/`)).toBe(404);
  expect(await get('/v2026-04/no-such-thing/')).toBe(404);
  const c = await counted();
  expect([...(c.get('POST /v2026-04/events/') ?? [])].sort()).toEqual(['202', '401', '403', '415']);
  expect(c.get('GET /v2026-04/flows/{id}/')).toContain('404');
  expect(c.get('GET /v2026-04/activities/{id}/')).toContain('404');
  expect(c.get('GET unmatched')).toContain('404');
  // No series carries a path with an id in it.
  expect([...c.keys()].filter((k) => /[0-9a-f]{8}-[0-9a-f]{4}-/.test(k))).toEqual([]);
  expect([...c.keys()].filter((k) => k.startsWith('POST /events/'))).toEqual([]);
});

it('passes promtool check metrics, the whole exposition', async () => {
  const promtool = ensurePromtool();
  const text = await (await fetch(`${server.baseUrl}/metrics`)).text();
  const child = execFile(promtool, ['check', 'metrics']);
  const done = new Promise<{ code: number | null; out: string }>((resolve) => {
    let out = '';
    child.stdout!.on('data', (d) => (out += d));
    child.stderr!.on('data', (d) => (out += d));
    child.on('exit', (code) => resolve({ code, out }));
  });
  child.stdin!.end(text);
  const { code, out } = await done;
  expect(out.trim()).toBe('');
  expect(code).toBe(0);
}, 300_000);
