/**
 * The noisy producer of the noisy-neighbour scenario, in a process of its own so its load does not stall the
 * harness's event loop (which times the neighbours). Sends single events with one key at NOISY_RATE per
 * second, open loop, for NOISY_MS, at most NOISY_INFLIGHT at a time (a request not sent because that many
 * are in flight counts as `skipped`), then prints its counts as one JSON line on stdout.
 */
import { Pool } from 'undici';

const base = process.env.NOISY_URL!;
const headers = JSON.parse(process.env.NOISY_HEADERS!) as Record<string, string>;
const rate = Number(process.env.NOISY_RATE);
const durationMs = Number(process.env.NOISY_MS);
const maxInflight = Number(process.env.NOISY_INFLIGHT ?? 256);

const pool = new Pool(base, { connections: 64, pipelining: 1, keepAliveTimeout: 30_000 });
const statuses: Record<string, number> = {};
const acceptedBySecond: number[] = [];
let sent = 0;
let skipped = 0;
let inflight = 0;
let withoutRetryAfter = 0;
let withoutRateLimitHeaders = 0;
let outsideEnvelope = 0;
let firstAt = 0;
let lastAt = 0;

async function one(i: number, t0: number): Promise<void> {
  inflight++;
  let status = 'error';
  try {
    const res = await pool.request({
      method: 'POST',
      path: '/v2026-04/events/',
      headers,
      body: JSON.stringify({ name: `Noise ${i}`, metric: { metric_name: 'noise', value: i } }),
      headersTimeout: 15_000,
      bodyTimeout: 15_000,
    });
    status = String(res.statusCode);
    const text = await res.body.text();
    if (res.statusCode === 202) {
      const s = Math.floor((Date.now() - t0) / 1000);
      acceptedBySecond[s] = (acceptedBySecond[s] ?? 0) + 1;
    } else {
      let parsed: any;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      if (!parsed?.error?.code || !parsed.error.request_id) outsideEnvelope++;
      if (res.statusCode === 429 && !res.headers['retry-after']) withoutRetryAfter++;
    }
    if ((res.statusCode === 202 || res.statusCode === 429) && !res.headers['ratelimit-policy']) withoutRateLimitHeaders++;
  } catch {
    status = 'error';
  } finally {
    inflight--;
    lastAt = Date.now();
    statuses[status] = (statuses[status] ?? 0) + 1;
  }
}

const t0 = Date.now();
firstAt = t0;
const running = new Set<Promise<void>>();
let due = 0;
while (Date.now() - t0 < durationMs) {
  const target = Math.floor(((Date.now() - t0) / 1000) * rate);
  while (due < target) {
    due++;
    if (inflight >= maxInflight) {
      skipped++;
      continue;
    }
    const p = one(sent++, t0);
    running.add(p);
    void p.finally(() => running.delete(p));
  }
  await new Promise((r) => setTimeout(r, 2));
}
const sendingMs = Date.now() - t0;
await Promise.allSettled([...running]);
await pool.close();
for (let s = 0; s < acceptedBySecond.length; s++) acceptedBySecond[s] ??= 0;
process.stdout.write(
  `${JSON.stringify({ sent, skipped, statuses, acceptedBySecond, withoutRetryAfter, withoutRateLimitHeaders, outsideEnvelope, sendingMs, spanMs: lastAt - firstAt })}\n`,
);
