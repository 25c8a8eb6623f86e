import type { RequestHandler } from 'express';
import { queryRows, sql, type Db } from '@shopstream/db';
import { counter, type Counter } from '@shopstream/telemetry';
import { ApiError } from './errors.js';

/** Shared with the leased limiter (leasedRateLimit.ts): one counter, by bucket. */
export const rateLimited: Counter<'bucket'> = counter('shopstream_rate_limited_total', 'Requests answered 429 by a rate limit, by bucket.', ['bucket']);

export interface RateLimitOptions {
  db: Db;
  /** Names the counter: each bucket counts on its own. */
  bucket: string;
  /** Requests allowed per window, per API key and shop. */
  limit: number;
  windowSeconds: number;
  /** The policy name in the RateLimit-Policy and RateLimit fields. */
  policy?: string;
  /** The window's clock; by default the database's now(), which every replica shares. Tests drive it. */
  now?: () => Date;
}

/**
 * A fixed window per (bucket, API key, shop), held in Postgres so every replica counts into the same row:
 * the window starts at the first request after the previous one ended. One atomic upsert per request.
 * Sets RateLimit-Limit/-Remaining/-Reset (seconds) and the IETF draft RateLimit-Policy/RateLimit fields
 * on every response it lets through or rejects; a rejected request gets 429 `rate_limited` with Retry-After.
 * Goes after requireAuth (it needs req.apiKeyId and req.shopId).
 */
export function rateLimit(o: RateLimitOptions): RequestHandler {
  const policy = o.policy ?? 'default';
  const window = `${o.windowSeconds} seconds`;
  return async (req, res, next) => {
    try {
      // now() is the database's clock: replicas with skewed clocks still agree on the window.
      const now = o.now ? sql`${o.now().toISOString()}::timestamptz` : sql`now()`;
      const [counted] = await queryRows(
        o.db,
        sql`
        INSERT INTO rate_limits AS r (bucket, api_key_id, shop_id, window_start, count)
        VALUES (${o.bucket}, ${req.apiKeyId}, ${req.shopId}, ${now}, 1)
        ON CONFLICT (bucket, api_key_id, shop_id) DO UPDATE SET
          window_start = CASE WHEN r.window_start <= ${now} - ${window}::interval THEN ${now} ELSE r.window_start END,
          count = CASE WHEN r.window_start <= ${now} - ${window}::interval THEN 1 ELSE least(r.count + 1, ${o.limit + 1}) END
        RETURNING count, ceil(extract(epoch FROM (window_start + ${window}::interval - ${now})))::int AS reset`,
        (r) => ({ count: Number(r.count), reset: Number(r.reset) }),
      );
      const count = counted.count;
      const reset = Math.max(1, counted.reset);
      const remaining = Math.max(0, o.limit - count);
      res.setHeader('RateLimit-Limit', String(o.limit));
      res.setHeader('RateLimit-Remaining', String(remaining));
      res.setHeader('RateLimit-Reset', String(reset));
      res.setHeader('RateLimit-Policy', `"${policy}";q=${o.limit};w=${o.windowSeconds}`);
      res.setHeader('RateLimit', `"${policy}";r=${remaining};t=${reset}`);
      if (count > o.limit) {
        rateLimited.inc({ bucket: o.bucket });
        return next(
          new ApiError(
            'rate_limited',
            `At most ${o.limit} requests per ${o.windowSeconds} seconds for this API key and shop. Retry after ${reset} seconds.`,
            {},
            {
              'Retry-After': String(reset),
            },
          ),
        );
      }
      next();
    } catch (e) {
      next(e);
    }
  };
}
