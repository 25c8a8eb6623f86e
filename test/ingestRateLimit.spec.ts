import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { sql, type Db } from '@shopstream/db';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import {
  createTestShop,
  giveUpDuringContactLookup,
  metricSum as harnessMetricSum,
  startTestRuntime,
  startTestServer,
  waitFor,
  type TestServer,
} from '@shopstream/harness';

/**
 * The per-(API key, shop) limit of the event endpoints, on the real server, broker and database: a burst over
 * the limit is answered 429 rate_limited with Retry-After, the 2xx answers carry the RateLimit headers, keys
 * do not share a bucket, a bulk request counts its events, two servers on one database share the limit (each
 * leasing chunks from the same row), a request dropped because its client left gives its events back, and 0 turns
 * it off.
 *
 * No assertion depends on how fast this machine sends: the shared bucket refills on the database's clock, which
 * the tests hold (holdRefill) while they count, so what is admitted is exactly what the bucket held; where the
 * replica's own clock decides (when it asks the database again), the test freezes it (vi.useFakeTimers: the
 * servers run in this process).
 */
const started: { rt: Runtime; server: TestServer }[] = [];
async function serve(overrides: Record<string, string>, name: string): Promise<{ rt: Runtime; server: TestServer }> {
  // A lease that takes long on a loaded machine must not fail the replica open (its local bucket would admit
  // more than the shared one held): the database is slow here, never down.
  const rt = await startTestRuntime({ INGEST_RATE_LIMIT_LEASE_TIMEOUT_MS: '120000', ...overrides }, name);
  const server = await startTestServer(rt, [await startIngestApi(rt)]);
  const s = { rt, server };
  started.push(s);
  return s;
}
afterAll(async () => {
  for (const s of started.reverse()) {
    await s.server.stop().catch(() => {});
    await s.rt.close().catch(() => {});
  }
});

const event = (i: number) => ({ name: `Viewed ${i}`, metric: { metric_name: 'viewed_product', value: i } });
type Answer = { status: number; body: any; headers: Headers; ms: number };
async function post(base: string, headers: Record<string, string>, path: string, body: unknown): Promise<Answer> {
  const sent = performance.now();
  const res = await fetch(`${base}/v2026-04${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers, ms: performance.now() - sent };
}
const count = (as: Answer[], status: number) => as.filter((a) => a.status === status).length;

/**
 * Stops the shop's shared bucket from refilling: its refill clock (refilled_at) is set an hour ahead, and
 * ingest_rate_take refills only for the time since then. Tokens still move between the row and the replicas.
 */
async function holdRefill(db: Db, shopId: string): Promise<void> {
  const held = await db.query(sql`UPDATE ingest_rate_buckets SET refilled_at = clock_timestamp() + interval '1 hour' WHERE shop_id = ${shopId} RETURNING 1`);
  expect(held, 'the bucket exists once a request was charged').toHaveLength(1);
}
/** Lets the held bucket refill in full on its next lease, as if a long time had passed. */
async function releaseRefill(db: Db, shopId: string): Promise<void> {
  await db.query(sql`UPDATE ingest_rate_buckets SET refilled_at = clock_timestamp() - interval '1 hour' WHERE shop_id = ${shopId}`);
}
afterEach(() => {
  vi.useRealTimers();
});

function expectRateLimited(a: Answer) {
  expect(a.status).toBe(429);
  expect(a.body).toEqual({
    error: { code: 'rate_limited', message: expect.stringContaining('Retry after'), request_id: a.headers.get('x-request-id'), fields: {} },
  });
  expect(a.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
  expect(a.headers.get('ratelimit-remaining')).toMatch(/^\d+$/);
  expect(Number(a.headers.get('ratelimit-reset'))).toBeGreaterThanOrEqual(Number(a.headers.get('retry-after')));
}

describe('burst of 20/s (steady 1,000/min), chunks of 5', () => {
  let base: string;
  let rt: Runtime;
  beforeAll(async () => {
    ({
      rt,
      server: { baseUrl: base },
    } = await serve({ INGEST_RATE_LIMIT_PER_SECOND: '20', INGEST_RATE_LIMIT_PER_MINUTE: '1000', INGEST_RATE_LIMIT_CHUNK: '5' }, 'rl-burst'));
  });

  it('answers 202 with the RateLimit headers, then 429 with Retry-After over the burst; another key is not affected', async () => {
    const a = await createTestShop(rt);
    const first = await post(base, a.headers, '/events/', event(0));
    expect(first.status).toBe(202);
    expect(first.headers.get('ratelimit-policy')).toBe('"burst";q=20;w=1, "steady";q=1000;w=60');
    expect(first.headers.get('ratelimit-limit')).toBe('20');
    expect(Number(first.headers.get('ratelimit-remaining'))).toBeGreaterThanOrEqual(18);
    expect(Number(first.headers.get('ratelimit-remaining'))).toBeLessThanOrEqual(19);
    expect(first.headers.get('ratelimit-reset')).toMatch(/^\d+$/);
    expect(first.headers.get('ratelimit')).toMatch(/^"burst";r=\d+;t=\d+, "steady";r=\d+;t=\d+$/);

    // The first request leased a chunk; from here the bucket (20, one spent) refills nothing.
    await holdRefill(rt.db, a.shopId);
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => post(base, a.headers, '/events/', event(i + 1))));
    expect(answers.every((x) => x.status === 202 || x.status === 429)).toBe(true);
    const accepted = count(answers, 202) + 1;
    // At most the 20 the bucket held, however long the 40 took; the rest refused.
    expect(accepted).toBeLessThanOrEqual(20);
    expect(count(answers, 429)).toBeGreaterThanOrEqual(20);
    for (const x of answers.filter((x) => x.status === 202)) expect(x.headers.get('ratelimit-policy')).toBeTruthy();
    for (const x of answers.filter((x) => x.status === 429)) expectRateLimited(x);

    // Another key of the same shop, and the same key on another shop, each have buckets of their own.
    const b = await createTestShop(rt, a.shopId);
    const other = await createTestShop(rt);
    expect((await post(base, b.headers, '/events/', event(1))).status).toBe(202);
    expect((await post(base, other.headers, '/events/', event(1))).status).toBe(202);

    // And the limited key is served again once the bucket refilled (the replica asks again within a second).
    await releaseRefill(rt.db, a.shopId);
    await waitFor(async () => (await post(base, a.headers, '/events/', event(99))).status === 202, {
      timeoutMs: 60_000,
      intervalMs: 100,
      message: 'a 202 for the limited key after its bucket refilled',
    });
  });
});

const HOLD_MS = 150;
describe('a producer held over its limit (burst 5/s, steady 10/min, chunks of 5, its 429s held 75-150 ms)', () => {
  let base: string;
  let rt: Runtime;
  beforeAll(async () => {
    ({
      rt,
      server: { baseUrl: base },
    } = await serve(
      { INGEST_RATE_LIMIT_PER_SECOND: '5', INGEST_RATE_LIMIT_PER_MINUTE: '10', INGEST_RATE_LIMIT_CHUNK: '5', INGEST_RATE_LIMIT_HOLD_MS: String(HOLD_MS) },
      'rl-shed',
    ));
  });
  const shedCount = async () => {
    const text = await (await fetch(`${base}/metrics`)).text();
    return [...text.matchAll(/^shopstream_http_shed_total\{[^}]*status="429"[^}]*\} (\S+)$/gm)].reduce((a, m) => a + Number(m[1]), 0);
  };

  it('is answered its 429s before the router once its bucket is known dry: the same envelope, headers and metrics', async () => {
    const a = await createTestShop(rt);
    const shedBefore = await shedCount();
    const answers: Answer[] = [await post(base, a.headers, '/events/', event(0))];
    // The first request leased the burst's five; the bucket refills nothing from here, and the replica's clock
    // stands still, so the dry bucket it learns of stays dry to it (no lease comes due) however slow the requests.
    await holdRefill(rt.db, a.shopId);
    vi.useFakeTimers({ toFake: ['Date'] });
    // One at a time: the next four spend the chunk; the short lease that follows marks the bucket dry.
    for (let i = 1; i < 40; i++) answers.push(await post(base, a.headers, i % 2 ? '/events/' : '/events/bulk/', i % 2 ? event(i) : { events: [event(i)] }));
    vi.useRealTimers();
    const accepted = answers.filter((x) => x.status === 202 || x.status === 200);
    expect(accepted.length).toBe(5);
    const refused = answers.filter((x) => x.status === 429);
    expect(refused.length).toBe(35);
    for (const x of refused) expectRateLimited(x);
    // Answered by the shed path, all but those that reached express before the replica knew the bucket dry.
    const shed = (await shedCount()) - shedBefore;
    expect(shed).toBeGreaterThanOrEqual(refused.length - 1);
    expect(shed).toBeLessThanOrEqual(refused.length);
    // Each shed 429 was held (half to all of HOLD_MS) before it was sent: the producer's next request waited.
    expect(refused.filter((x) => x.ms >= HOLD_MS / 2).length).toBeGreaterThanOrEqual(shed);
    const text = await (await fetch(`${base}/metrics`)).text();
    const counted = [...text.matchAll(/^shopstream_http_requests_total\{[^}]*route="\/v2026-04\/events\/(?:bulk\/)?",status="429"\} (\S+)$/gm)].reduce(
      (n, m) => n + Number(m[1]),
      0,
    );
    expect(counted).toBeGreaterThanOrEqual(refused.length);

    // Not shed: another shop of the same key, a key the server does not know, a malformed shop.
    const other = await createTestShop(rt);
    expect((await post(base, other.headers, '/events/', event(1))).status).toBe(202);
    expect((await post(base, { ...a.headers, authorization: 'Bearer nope' }, '/events/', event(1))).status).toBe(401);
    expect((await post(base, { ...a.headers, 'x-shop-id': 'not-a-shop' }, '/events/', event(1))).status).toBe(400);
  });
});

describe('60/min steady only, chunks of 10, two servers on one database', () => {
  let one: { rt: Runtime; server: TestServer };
  let two: { rt: Runtime; server: TestServer };
  const env = { INGEST_RATE_LIMIT_PER_SECOND: '0', INGEST_RATE_LIMIT_PER_MINUTE: '60', INGEST_RATE_LIMIT_CHUNK: '10' };
  beforeAll(async () => {
    one = await serve(env, 'rl-replica-1');
    two = await serve({ ...env, DATABASE_URL: one.rt.env.DATABASE_URL!, TOPIC_PREFIX: one.rt.env.TOPIC_PREFIX }, 'rl-replica-2');
  });

  it('counts each event of a bulk request, and records none of a refused one', async () => {
    const a = await createTestShop(one.rt);
    const bulk = (n: number, from: number) =>
      post(one.server.baseUrl, a.headers, '/events/bulk/', { events: Array.from({ length: n }, (_, i) => event(from + i)) });
    const first = await bulk(50, 0);
    expect(first.status).toBe(200);
    await holdRefill(one.rt.db, a.shopId);
    expect(first.body.results.filter((r: any) => r.status === 'success')).toHaveLength(50);
    expect(first.headers.get('ratelimit-policy')).toBe('"steady";q=60;w=60');
    expect(Number(first.headers.get('ratelimit-remaining'))).toBeLessThanOrEqual(11);
    const refused = await bulk(50, 50);
    expectRateLimited(refused);
    // 40 tokens short at 1 a second (the replica's estimate: a few seconds may have refilled to its knowledge).
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(30);
    expect((await bulk(5, 100)).status).toBe(200);
  });

  it('holds one limit across both servers: accepted within the limit plus a chunk per server', async () => {
    const k = await createTestShop(one.rt);
    const answers: Answer[] = [await post(one.server.baseUrl, k.headers, '/events/', event(-1))];
    expect(answers[0].status).toBe(202);
    await holdRefill(one.rt.db, k.shopId);
    // 4 rounds of 50 requests, half to each server: 200 events at 60 a minute.
    for (let round = 0; round < 4; round++) {
      answers.push(
        ...(await Promise.all(Array.from({ length: 50 }, (_, i) => post((i % 2 ? two : one).server.baseUrl, k.headers, '/events/', event(round * 50 + i))))),
      );
    }
    expect(answers.every((x) => x.status === 202 || x.status === 429)).toBe(true);
    const accepted = count(answers, 202);
    const byServer = [0, 1].map((s) => answers.slice(1).filter((x, i) => i % 2 === s && x.status === 202).length);
    // Each server alone would take 60 (120 in all); shared, with nothing refilled: the bucket's 60.
    expect(accepted).toBeLessThanOrEqual(60);
    // At most the chunks the servers still hold are missing.
    expect(accepted).toBeGreaterThanOrEqual(60 - 2 * 10);
    expect(byServer[0]).toBeGreaterThan(0);
    expect(byServer[1]).toBeGreaterThan(0);
    for (const x of answers.filter((x) => x.status === 429)) expectRateLimited(x);
    // The shared row holds what is left, on the database's clock.
    const rows = await one.rt.db.query(sql`SELECT steady_tokens FROM ingest_rate_buckets WHERE shop_id = ${k.shopId}`);
    expect(rows).toHaveLength(1);
    expect(Number(rows[0].steady_tokens)).toBeLessThan(30);
  });
});

describe('a client that gave up (60/min steady only, chunks of 10)', () => {
  let rt: Runtime;
  let base: string;
  beforeAll(async () => {
    ({
      rt,
      server: { baseUrl: base },
    } = await serve({ INGEST_RATE_LIMIT_PER_SECOND: '0', INGEST_RATE_LIMIT_PER_MINUTE: '60', INGEST_RATE_LIMIT_CHUNK: '10' }, 'rl-gone'));
  });
  const metricSum = (name: string, labels: string[]) => harnessMetricSum(base, name, labels);

  it('gets back the events it was charged for when its request is dropped: the next request spends them', async () => {
    const a = await createTestShop(rt);
    const bulk = (events: unknown[]) => post(base, a.headers, '/events/bulk/', { events });
    const first = await bulk(Array.from({ length: 50 }, (_, i) => event(i)));
    expect(first.status).toBe(200);
    await holdRefill(rt.db, a.shopId);
    // 10 left (one more if a second refilled before the hold): a request of 10 takes them all.
    expect(Number(first.headers.get('ratelimit-remaining'))).toBeLessThanOrEqual(11);

    const abandonedBefore = await metricSum('shopstream_ingest_events_total', ['outcome="abandoned"', 'endpoint="bulk"']);
    const gaveUp = Array.from({ length: 10 }, (_, i) => ({ ...event(100 + i), contact: { email: `${randomUUID()}@example.com` } }));
    // Charged its 10 events, it waits in its contacts' look-up while its client leaves.
    await giveUpDuringContactLookup(rt, base, '/v2026-04/events/bulk/', a.headers, { events: gaveUp });
    await waitFor(async () => (await metricSum('shopstream_ingest_events_total', ['outcome="abandoned"', 'endpoint="bulk"'])) === abandonedBefore + 10, {
      message: 'its 10 events counted abandoned',
    });

    // Nothing refilled since the hold: the 10 events are there again only because the dropped request gave them back.
    const next = await bulk(Array.from({ length: 10 }, (_, i) => event(200 + i)));
    expect(next.status).toBe(200);
    expect(next.body.results.filter((r: any) => r.status === 'success')).toHaveLength(10);
    // And they are spent: at most the fraction of a token refilled before the hold is left.
    expectRateLimited(await bulk(Array.from({ length: 5 }, (_, i) => event(300 + i))));
  });

  it('gets back the events it was charged for when the request it left fails: the next request spends them', async () => {
    const a = await createTestShop(rt);
    const bulk = (events: unknown[]) => post(base, a.headers, '/events/bulk/', { events });
    const first = await bulk(Array.from({ length: 50 }, (_, i) => event(i)));
    expect(first.status).toBe(200);
    await holdRefill(rt.db, a.shopId);
    expect(Number(first.headers.get('ratelimit-remaining'))).toBeLessThanOrEqual(11);

    // Charged its 10 events, the request waits in its contacts' look-up; its client leaves; then the look-up fails
    // (its connection terminated): the 5xx it would have answered reaches no one.
    const gaveUp = Array.from({ length: 10 }, (_, i) => ({ ...event(100 + i), contact: { email: `${randomUUID()}@example.com` } }));
    await giveUpDuringContactLookup(rt, base, '/v2026-04/events/bulk/', a.headers, { events: gaveUp }, { failLookup: true });

    // Nothing refilled since the hold: a request of 10 goes through only once the failed one gave its 10 back.
    let next: Answer | undefined;
    await waitFor(
      async () => {
        next = await bulk(Array.from({ length: 10 }, (_, i) => event(200 + i)));
        return next.status === 200;
      },
      { message: "the failed request's 10 events given back" },
    );
    expect(next!.body.results.filter((r: any) => r.status === 'success')).toHaveLength(10);
    expectRateLimited(await bulk(Array.from({ length: 5 }, (_, i) => event(300 + i))));
  });
});

describe('0 = off', () => {
  it('takes any number of events from one key and sends no RateLimit headers', async () => {
    const { rt, server } = await serve({ INGEST_RATE_LIMIT_PER_SECOND: '0', INGEST_RATE_LIMIT_PER_MINUTE: '0' }, 'rl-off');
    const a = await createTestShop(rt);
    const bulks = await Promise.all(
      Array.from({ length: 6 }, (_, b) =>
        post(server.baseUrl, a.headers, '/events/bulk/', { events: Array.from({ length: 100 }, (_, i) => event(b * 100 + i)) }),
      ),
    );
    const singles = await Promise.all(Array.from({ length: 100 }, (_, i) => post(server.baseUrl, a.headers, '/events/', event(1000 + i))));
    expect(bulks.map((x) => x.status)).toEqual(Array(6).fill(200));
    expect(singles.map((x) => x.status)).toEqual(Array(100).fill(202));
    expect(singles.every((x) => x.headers.get('ratelimit-policy') === null && x.headers.get('ratelimit') === null)).toBe(true);
  });
});
