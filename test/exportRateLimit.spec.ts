import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { createTestShop, startTestRuntime, startTestServer, type TestServer } from '@shopstream/harness';
import { queryApi } from '@shopstream/query-api';
import { exportRoutes } from '@shopstream/query-api/export';

/** Two query-api processes (two runtimes, two servers) on one database: the limit is theirs together. */
let rtA: Runtime;
let rtB: Runtime;
let a: TestServer;
let b: TestServer;

const exportService = (r: Runtime): StartedService => ({ name: 'export', ...exportRoutes(queryApi.context(r)), stop: async () => {} });

beforeAll(async () => {
  rtA = await startTestRuntime({}, 'query-api-a');
  rtB = await startTestRuntime({ DATABASE_URL: rtA.env.DATABASE_URL, TOPIC_PREFIX: rtA.env.TOPIC_PREFIX }, 'query-api-b');
  a = await startTestServer(rtA, [exportService(rtA)]);
  b = await startTestServer(rtB, [exportService(rtB)]);
});
afterAll(async () => {
  await a?.stop();
  await b?.stop();
});

const get = async (server: TestServer, headers: Record<string, string>, query = '') => {
  const res = await fetch(`${server.baseUrl}/v2026-04/conversations/export/${query}`, { headers });
  return { status: res.status, headers: res.headers, body: await res.json() };
};

function expectRateLimitHeaders(h: Headers, remaining: number) {
  expect(h.get('ratelimit-limit')).toBe('60');
  expect(h.get('ratelimit-remaining')).toBe(String(remaining));
  const reset = Number(h.get('ratelimit-reset'));
  expect(reset).toBeGreaterThanOrEqual(1);
  expect(reset).toBeLessThanOrEqual(60);
  expect(h.get('ratelimit-policy')).toBe('"default";q=60;w=60');
  expect(h.get('ratelimit')).toBe(`"default";r=${remaining};t=${reset}`);
}

describe('export rate limit: 60 requests per minute per API key and shop', () => {
  it('answers the 61st request in a minute with 429 and Retry-After, every answer with the rate-limit headers', async () => {
    const { headers } = await createTestShop(rtA);
    for (let i = 1; i <= 60; i++) {
      // Bad requests count too, and carry the headers as well.
      const r = await get(a, headers, i % 10 === 0 ? '?limit=0' : '');
      expect(r.status, `request ${i}`).toBe(i % 10 === 0 ? 400 : 200);
      expectRateLimitHeaders(r.headers, 60 - i);
    }
    const r = await get(a, headers);
    expect(r.status).toBe(429);
    expect(r.body.error.code).toBe('rate_limited');
    expectRateLimitHeaders(r.headers, 0);
    expect(r.headers.get('retry-after')).toBe(r.headers.get('ratelimit-reset'));
    expect(r.body.error.request_id).toBe(r.headers.get('x-request-id'));
  });

  it('counts requests alternating between two query-api processes as one', async () => {
    const { headers } = await createTestShop(rtA);
    for (let i = 1; i <= 60; i++) {
      const r = await get(i % 2 === 0 ? a : b, headers);
      expect(r.status, `request ${i}`).toBe(200);
      expect(r.headers.get('ratelimit-remaining')).toBe(String(60 - i));
    }
    expect((await get(a, headers)).status).toBe(429);
    expect((await get(b, headers)).status).toBe(429);
  });

  it("keeps another shop's counter, and another key's, apart", async () => {
    const exhausted = await createTestShop(rtA);
    // Concurrent, on both processes: the upsert is atomic, so exactly 60 get through.
    const burst = await Promise.all(Array.from({ length: 60 }, (_, i) => get(i % 2 ? a : b, exhausted.headers)));
    expect(burst.map((r) => r.status)).toEqual(Array(60).fill(200));
    expect(burst.map((r) => Number(r.headers.get('ratelimit-remaining'))).sort((x, y) => x - y)).toEqual(Array.from({ length: 60 }, (_, i) => i));
    expect((await get(a, exhausted.headers)).status).toBe(429);

    // Another shop of the same key.
    const second = await rtA.apiKeys.create([exhausted.shopId, randomUUID()], 'two shops');
    const shops = await rtA.apiKeys.resolve(second.secret);
    const otherShop = [...shops!.shops].find((s) => s !== exhausted.shopId)!;
    const h = (shop: string) => ({ authorization: `Bearer ${second.secret}`, 'x-shop-id': shop });
    // The same shop with another key has a counter of its own...
    const r1 = await get(b, h(exhausted.shopId));
    expect(r1.status).toBe(200);
    expect(r1.headers.get('ratelimit-remaining')).toBe('59');
    // ...and so has another shop with that key.
    const r2 = await get(a, h(otherShop));
    expect(r2.status).toBe(200);
    expect(r2.headers.get('ratelimit-remaining')).toBe('59');
    // The exhausted pair stays limited.
    expect((await get(b, exhausted.headers)).status).toBe(429);
  });
});
