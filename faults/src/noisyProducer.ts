/**
 * The noisy producer of the noisy-neighbour scenario, in a process of its own so its load does not stall the
 * harness's event loop (which times the neighbours). Sends single events with one key at the rates of
 * NOISY_SCHEDULE in turn, open loop, at most NOISY_INFLIGHT at a time (a request not sent because that many
 * are in flight counts as `skipped`); prints a line as each phase starts, then its counts as one JSON line.
 */
import { jsonOrUndefined } from './services.js';
import { Pool } from 'undici';

const base = process.env.NOISY_URL!;
const headers = JSON.parse(process.env.NOISY_HEADERS!) as Record<string, string>;
/** Rates in turn: NOISY_SCHEDULE, a JSON array of { rate, ms } (rate 0: silent for ms), or NOISY_RATE for NOISY_MS. */
const schedule = JSON.parse(process.env.NOISY_SCHEDULE ?? JSON.stringify([{ rate: Number(process.env.NOISY_RATE), ms: Number(process.env.NOISY_MS) }])) as {
  rate: number;
  ms: number;
}[];
const maxInflight = Number(process.env.NOISY_INFLIGHT ?? 256);

const pool = new Pool(base, { connections: 64, pipelining: 1, keepAliveTimeout: 30_000 });
const statuses: Record<string, number> = {};
const statusesByPhase: Record<string, number>[] = schedule.map(() => ({}));
const acceptedByPhase: number[] = schedule.map(() => 0);
let phase = 0;
const acceptedBySecond: number[] = [];
/** The counts the last line reports: requests sent, not sent (NOISY_INFLIGHT in flight), and answers off the contract. */
const counts = { sent: 0, skipped: 0, withoutRetryAfter: 0, withoutRateLimitHeaders: 0, outsideEnvelope: 0 };
let inflight = 0;
let firstAt = 0;
let lastAt = 0;

async function one(i: number, t0: number): Promise<void> {
  inflight++;
  const k = phase;
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
      acceptedByPhase[k]++;
      const s = Math.floor((Date.now() - t0) / 1000);
      acceptedBySecond[s] = (acceptedBySecond[s] ?? 0) + 1;
    } else {
      const parsed = jsonOrUndefined(text);
      if (!parsed?.error?.code || !parsed.error.request_id) counts.outsideEnvelope++;
      if (res.statusCode === 429 && !res.headers['retry-after']) counts.withoutRetryAfter++;
    }
    if ((res.statusCode === 202 || res.statusCode === 429) && !res.headers['ratelimit-policy']) counts.withoutRateLimitHeaders++;
  } catch {
    status = 'error';
  } finally {
    inflight--;
    lastAt = Date.now();
    statuses[status] = (statuses[status] ?? 0) + 1;
    statusesByPhase[k][status] = (statusesByPhase[k][status] ?? 0) + 1;
  }
}

const t0 = Date.now();
firstAt = t0;
const running = new Set<Promise<void>>();
for (phase = 0; phase < schedule.length; phase++) {
  const { rate, ms } = schedule[phase];
  // Each phase is announced as it starts (a line of its own), so the harness tags what it measures meanwhile.
  process.stdout.write(`${JSON.stringify({ phase, at: Date.now() })}\n`);
  const p0 = Date.now();
  let due = 0;
  while (Date.now() - p0 < ms) {
    const target = Math.floor(((Date.now() - p0) / 1000) * rate);
    while (due < target) {
      due++;
      if (inflight >= maxInflight) {
        counts.skipped++;
        continue;
      }
      const p = one(counts.sent++, t0);
      running.add(p);
      void p.finally(() => running.delete(p));
    }
    await new Promise((r) => setTimeout(r, 2));
  }
}
phase = schedule.length - 1;
// The schedule is over: said while this process is still there to be measured (the harness reads its CPU time).
process.stdout.write(`${JSON.stringify({ end: true })}\n`);
await new Promise((r) => setTimeout(r, 300));
const sendingMs = Date.now() - t0;
await Promise.allSettled([...running]);
await pool.close();
for (let s = 0; s < acceptedBySecond.length; s++) acceptedBySecond[s] ??= 0;
process.stdout.write(`${JSON.stringify({ ...counts, statuses, statusesByPhase, acceptedByPhase, acceptedBySecond, sendingMs, spanMs: lastAt - firstAt })}\n`);
