import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectPostgres, migrate, type Db } from '@shopstream/db';
import { ApiError, LeasedRateLimiter, rateLimit } from '@shopstream/http';
import { createTestDatabase, testInfra } from '@shopstream/testkit';

/**
 * Both rate limiters on a clock the test turns, on a real database: what they admit follows from the limits
 * and the clock alone, never from how fast this machine sends.
 */
let db: Db;
beforeAll(async () => {
  db = connectPostgres({ url: await createTestDatabase(testInfra().databaseUrl), poolSize: 2 });
  await migrate(db);
});
afterAll(async () => {
  await db?.close();
});

/** A clock that moves only when told. */
function testClock(start = Date.parse('2026-04-01T00:00:00Z')) {
  let t = start;
  return { now: () => t, date: () => new Date(t), advance: (ms: number) => void (t += ms) };
}

/** Runs the middleware as express would for a request of (apiKeyId, shopId): the error it passed on, and the headers it set. */
type Middleware = ReturnType<typeof rateLimit>;
async function through(mw: Middleware, apiKeyId: string, shopId: string) {
  const headers: Record<string, string> = {};
  const req = { apiKeyId, shopId } as unknown as Parameters<Middleware>[0];
  const res = { setHeader: (k: string, v: string) => void (headers[k.toLowerCase()] = v) } as unknown as Parameters<Middleware>[1];
  const passed = await new Promise<unknown>((resolve, reject) => {
    Promise.resolve(mw(req, res, resolve)).catch(reject);
  });
  return { error: passed as ApiError | undefined, headers };
}

describe('rateLimit (a fixed window in Postgres) on a test clock', () => {
  it('admits the limit in a window, refuses the next with Retry-After to the window end, and opens a new window when it ends', async () => {
    const clock = testClock();
    const mw = rateLimit({ db, bucket: `clock-${randomUUID()}`, limit: 3, windowSeconds: 60, now: clock.date });
    const [key, shop] = [randomUUID(), randomUUID()];
    for (let i = 1; i <= 3; i++) {
      const r = await through(mw, key, shop);
      expect(r.error).toBeUndefined();
      expect(r.headers['ratelimit-remaining']).toBe(String(3 - i));
      // The window started at the first request; each comes 10 s after the one before.
      expect(r.headers['ratelimit-reset']).toBe(String(70 - i * 10));
      clock.advance(10_000);
    }
    // 30 s into the window: the fourth is refused until it ends.
    const refused = await through(mw, key, shop);
    expect(refused.error).toBeInstanceOf(ApiError);
    expect(refused.error!.code).toBe('rate_limited');
    expect(refused.error!.headers).toEqual({ 'Retry-After': '30' });
    // Another shop of the same key counts on its own.
    expect((await through(mw, key, randomUUID())).error).toBeUndefined();

    clock.advance(29_000);
    expect((await through(mw, key, shop)).error!.headers).toEqual({ 'Retry-After': '1' });
    clock.advance(1_000);
    const next = await through(mw, key, shop);
    expect(next.error).toBeUndefined();
    expect(next.headers['ratelimit-remaining']).toBe('2');
    expect(next.headers['ratelimit-reset']).toBe('60');
  });
});

describe('LeasedRateLimiter failed open (its database gone) on a test clock', () => {
  it("counts on its local buckets: the burst, then refusals with Retry-After, then what the clock's second refilled", async () => {
    // A database of its own, closed before the first lease: every lease fails, as in an outage.
    const gone = connectPostgres({ url: await createTestDatabase(testInfra().databaseUrl), poolSize: 1 });
    await gone.close();
    const clock = testClock();
    const failedOpen: unknown[] = [];
    const limiter = new LeasedRateLimiter({
      db: gone,
      bucket: 'clock',
      perSecond: 3,
      perMinute: 6,
      now: clock.now,
      failOpenMs: 60_000,
      onFailOpen: (e) => failedOpen.push(e),
    });
    try {
      const [key, shop] = [randomUUID(), randomUUID()];
      const take = () => limiter.take(key, shop, 1);
      for (let i = 0; i < 3; i++) expect(await take()).toMatchObject({ allowed: true, shared: false });
      expect(failedOpen).toHaveLength(1);
      const refused = await take();
      expect(refused).toMatchObject({ allowed: false, shared: false, retryAfter: 1 });
      expect(limiter.error(refused).code).toBe('rate_limited');

      // A second later the burst is full again; the steady minute's six are then spent.
      clock.advance(1_000);
      for (let i = 0; i < 3; i++) expect(await take()).toMatchObject({ allowed: true, shared: false });
      clock.advance(1_000);
      const steady = await take();
      expect(steady).toMatchObject({ allowed: false, shared: false });
      // Six a minute: a token every 10 s, 2 s of which have passed.
      expect(steady.retryAfter).toBe(8);
    } finally {
      await limiter.close();
    }
  });
});
