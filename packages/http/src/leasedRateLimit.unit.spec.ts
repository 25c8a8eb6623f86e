import { afterEach, describe, expect, it } from 'vitest';
import type { Db } from '@shopstream/db';
import { LeasedRateLimiter, type LeasedRateLimitOptions, type RateDecision } from './leasedRateLimit.js';

/**
 * What the leased limiter decides before it ever leases: its policies, headers and 429 from the limits alone.
 * No call here reaches the database (test/rateLimitClock.spec.ts and test/ingestRateLimit.spec.ts lease from a real one).
 */
const noDatabase = {} as Db;
const made: LeasedRateLimiter[] = [];
const limiter = (o: Partial<LeasedRateLimitOptions>) => {
  const l = new LeasedRateLimiter({ db: noDatabase, bucket: 'unit', perSecond: 0, perMinute: 0, ...o });
  made.push(l);
  return l;
};
afterEach(async () => {
  await Promise.all(made.splice(0).map((l) => l.close()));
});

describe('LeasedRateLimiter, before any lease', () => {
  it('has a burst and a steady policy, in the IETF draft RateLimit-Policy form; the smaller bucket is the most one request takes', () => {
    const l = limiter({ perSecond: 350, perMinute: 3_500 });
    expect(l.enabled).toBe(true);
    expect(l.policyHeader).toBe('"burst";q=350;w=1, "steady";q=3500;w=60');
    expect(l.capacity).toBe(350);
    expect(limiter({ perSecond: 20, perMinute: 10 }).capacity).toBe(10);
  });

  it('drops a policy whose limit is 0, and is off when both are', () => {
    expect(limiter({ perMinute: 60 }).policyHeader).toBe('"steady";q=60;w=60');
    expect(limiter({ perSecond: 5 }).policyHeader).toBe('"burst";q=5;w=1');
    expect(limiter({}).enabled).toBe(false);
  });

  it('sheds nothing for a (key, shop) it has not seen: the request goes on to take(), which may lease', () => {
    expect(limiter({ perSecond: 5, perMinute: 10 }).rejectNow('key', 'shop')).toBeUndefined();
  });

  it("answers a refusal 429 rate_limited naming every policy in the limit's unit, with Retry-After beside the RateLimit headers", () => {
    const l = limiter({ perSecond: 5, perMinute: 10, unit: 'events' });
    const refused: RateDecision = { allowed: false, shared: true, retryAfter: 4, headers: { 'RateLimit-Limit': '10' }, refund: () => {} };
    const e = l.error(refused);
    expect(e.code).toBe('rate_limited');
    expect(e.status).toBe(429);
    expect(e.message).toBe('At most 5 events per second and 10 events per minute for this API key and shop. Retry after 4 seconds.');
    expect(e.headers).toEqual({ 'RateLimit-Limit': '10', 'Retry-After': '4' });
  });

  it('sets every header of a decision on the response', () => {
    const set: [string, string][] = [];
    LeasedRateLimiter.setHeaders(
      { setHeader: (k, v) => set.push([k, v]) },
      {
        allowed: true,
        shared: true,
        retryAfter: 0,
        headers: { 'RateLimit-Limit': '5', 'RateLimit-Remaining': '4' },
        refund: () => {},
      },
    );
    expect(set).toEqual([
      ['RateLimit-Limit', '5'],
      ['RateLimit-Remaining', '4'],
    ]);
  });
});
