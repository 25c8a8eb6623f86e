import { afterAll, expect, it } from 'vitest';
import { startIngestApi } from '@shopstream/ingest-api';
import { startQueryApi } from '@shopstream/query-api';
import { createTestShop, servicesOnOwnPostgres, waitFor } from '@shopstream/harness';

/**
 * PostgreSQL stopped under the services, then started again: requests that need it are answered 503
 * `unavailable` with Retry-After in the error body (they were 500s, or hung in the pool's queue for a minute),
 * /readyz says the database is not ready, events without a contact keep being accepted with a key known from
 * before, and everything answers again once it is back. A PostgreSQL of the test's own (the embedded mode's
 * engine in a temporary directory), so stopping it disturbs no one.
 */
const outage = servicesOnOwnPostgres('pg-outage');
afterAll(() => outage.close());

it('answers 503 with Retry-After while PostgreSQL is stopped, keeps taking contactless events from known keys, and recovers', async () => {
  // A key cache of 200 ms: the outage outlasts it, so the key must come from the cache kept through the outage.
  const { rt, server } = await outage.start(
    {
      API_KEY_CACHE_TTL_MS: '200',
      // The per-key ingest limit on, at its defaults: it leases from Postgres and must fail open without it.
      INGEST_RATE_LIMIT_PER_SECOND: '350',
      INGEST_RATE_LIMIT_PER_MINUTE: '3500',
    },
    async (rt) => [await startIngestApi(rt), await startQueryApi(rt)],
  );
  const shop = await createTestShop(rt);
  const call = async (method: string, p: string, body?: unknown, headers = shop.headers) => {
    const res = await fetch(`${server.baseUrl}${p}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, body: text ? (JSON.parse(text) as any) : null, headers: res.headers };
  };
  const contactless = { name: 'Viewed', metric: { metric_name: 'viewed_product' } };
  const withContact = { name: 'Placed order', metric: { metric_name: 'placed_order' }, contact: { email: 'ada@example.com' } };
  expect((await call('POST', '/v2026-04/events/', withContact)).status).toBe(202);
  const before = await call('POST', '/v2026-04/events/', contactless);
  expect(before.status).toBe(202);

  await outage.stopPostgres(); // pg_ctl stop: the server is gone
  await new Promise((r) => setTimeout(r, 300)); // past the key cache's 200 ms

  const unavailable = (r: { status: number; body: any; headers: Headers }) => {
    expect(r.status).toBe(503);
    expect(r.headers.get('retry-after')).toBe('2');
    expect(r.body).toEqual({ error: { code: 'unavailable', message: expect.any(String), request_id: r.headers.get('x-request-id'), fields: {} } });
  };
  unavailable(await call('POST', '/v2026-04/events/', withContact));
  unavailable(await call('GET', `/v2026-04/activities/${before.body.activity_id}/`));
  unavailable(await call('GET', '/v2026-04/flows/'));
  // An unknown key cannot be told from a revoked one without the database: 503 too, not 401 and not 500.
  unavailable(await call('GET', '/v2026-04/flows/', undefined, { ...shop.headers, authorization: `Bearer ssk_${'n'.repeat(43)}` }));
  // The known key, from the cache kept through the outage; the event needs only the broker.
  const during = await call('POST', '/v2026-04/events/', contactless);
  expect(during.status).toBe(202);
  // Counted by this replica alone while the shared bucket is out of reach (fail open), still with its headers.
  expect(during.headers.get('ratelimit-policy')).toBe('"burst";q=350;w=1, "steady";q=3500;w=60');
  const burst = await Promise.all(Array.from({ length: 20 }, () => call('POST', '/v2026-04/events/', contactless)));
  expect(burst.map((r) => r.status)).toEqual(Array(20).fill(202));
  const ready = await call('GET', '/readyz');
  expect(ready.status).toBe(503);
  expect(ready.body.checks).toMatchObject({ database: false, bus: true });

  await outage.startPostgres();
  await waitFor(async () => (await call('POST', '/v2026-04/events/', withContact)).status === 202, {
    timeoutMs: 30_000,
    message: 'ingest with a contact after the database came back',
  });
  expect((await call('GET', '/readyz')).status).toBe(200);
  expect((await call('GET', '/v2026-04/flows/')).status).toBe(200);
  expect((await call('GET', '/v2026-04/flows/', undefined, { ...shop.headers, authorization: `Bearer ssk_${'n'.repeat(43)}` })).status).toBe(401);
}, 120_000);
