import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'undici';
import { ownKafka } from '../ownKafka.js';
import { cpuMeter, type CpuUse } from '@shopstream/testkit/cpu';
import { jsonOrUndefined, serviceEnv, startScenarioService, untilReady } from '../services.js';
import type { Context, Figures, Scenario } from '../types.js';
import { ownPostgres } from '../ownPostgres.js';

const PER_SECOND = 350;
const PER_MINUTE = 3_500;
const CHUNK = 50;
/**
 * INGEST_RATE_LIMIT_HOLD_MS, the default unless FAULTS_NOISY_HOLD_MS says otherwise (0: the 429s sent at once, to
 * compare): the shed path's 429s are held half of it to all of it.
 */
const HOLD_MS = Number(process.env.FAULTS_NOISY_HOLD_MS ?? 500);

/** What noisyProducer.ts prints. */
interface ProducerCounts {
  sent: number;
  skipped: number;
  statuses: Record<string, number>;
  /** Per window of the schedule. */
  statusesByPhase: Record<string, number>[];
  acceptedByPhase: number[];
  acceptedBySecond: number[];
  withoutRetryAfter: number;
  withoutRateLimitHeaders: number;
  outsideEnvelope: number;
  sendingMs: number;
  spanMs: number;
}

interface Sample {
  ms: number;
  status: string;
  /** The noisy key's schedule window it was sent in (-1: before the first). */
  window: number;
}

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
};
const round = (x: number, d = 1) => Number(x.toFixed(d));

/** shopstream_rate_limit_leases_total of a service's /metrics, by outcome. */
async function leases(base: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^shopstream_rate_limit_leases_total\{([^}]*)\} (\S+)$/gm)) {
    const outcome = /outcome="([^"]+)"/.exec(m[1])?.[1];
    if (outcome && /bucket="events"/.test(m[1])) out[outcome] = Number(m[2]);
  }
  return out;
}

/** The event-loop delay of a service since its previous scrape (prom-client resets it per collect) and its GC time so far. */
async function loopAndGc(base: string): Promise<{ lagP99Ms: number; lagMaxMs: number; gcSeconds: number }> {
  const text = await (await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
  const one = (name: string) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  const gcSeconds = [...text.matchAll(/^nodejs_gc_duration_seconds_sum\{[^}]*\} (\S+)$/gm)].reduce((a, m) => a + Number(m[1]), 0);
  return {
    lagP99Ms: round(one('nodejs_eventloop_lag_p99_seconds') * 1000, 2),
    lagMaxMs: round(one('nodejs_eventloop_lag_max_seconds') * 1000, 2),
    gcSeconds: round(gcSeconds, 3),
  };
}

/**
 * One producer far over its per-key ingest limit (2,000 single events/s against 350/s burst and 3,500/min
 * steady) beside neighbour keys at a modest rate (50/s each): the noisy key is answered 429 + Retry-After for
 * what is over, within its limit; the neighbours are never limited and their latency stays where it was
 * without the noise. Its own broker and PostgreSQL, ingest-api as a separate process, the noisy producer a
 * process of its own, the neighbours from the harness process (which times them).
 */
export const noisyNeighbour: Scenario = {
  name: 'noisy-neighbour',
  description:
    'a producer at 2,000/s over a 350/s + 3,500/min per-key limit beside 50/s neighbours: 429s for it only, neighbours p99 while it sends 2,000/s ≤ 1.5x while it sends at its limit, 0 5xx',
  async run(ctx: Context): Promise<Figures> {
    const noisyRate = 2_000;
    const neighbours = 4;
    const neighbourRate = 50;
    const warmMs = 3_000;
    // The noisy key's schedule. The first window at 2,000/s spends what its buckets held (350/s until the
    // steady bucket's 3,500 are gone, about 12 s): load within the limit, reported apart ("burst"). Then windows
    // at 2,000/s ("held": its steady limit let through, the rest answered 429) alternate with windows at its
    // steady limit ("at limit": the same events let through, nothing refused), so whatever else this shared
    // machine does falls on both alike. The goal compares the two: what the neighbours pay for the 1,900
    // requests/s the key sends beyond its limit. The events the limit lets through cost what any producer's
    // events cost (the silent windows before and the burst show that part).
    const quick = ctx.opts.quick;
    const windowMs = quick ? 6_000 : 10_000;
    const cycles = quick ? 2 : 3;
    const atLimitRate = Math.floor(PER_MINUTE / 60);
    const schedule: { label: 'baseline' | 'burst' | 'held' | 'limit'; rate: number; ms: number }[] = [
      { label: 'baseline', rate: 0, ms: windowMs },
      { label: 'burst', rate: noisyRate, ms: 15_000 },
      ...Array.from({ length: cycles }, () => [
        { label: 'held' as const, rate: noisyRate, ms: windowMs },
        { label: 'limit' as const, rate: atLimitRate, ms: windowMs },
      ]).flat(),
    ];

    const pg = await ownPostgres(ctx, { poolSize: 1 });
    const pgVersion = pg.version;
    const kafka = await ownKafka(ctx);

    // One key and shop per producer: the noisy one first.
    const producers = Array.from({ length: neighbours + 1 }, () => ({ shopId: randomUUID(), key: `faults_${randomBytes(24).toString('base64url')}` }));
    const headersOf = (p: { shopId: string; key: string }) => ({ authorization: `Bearer ${p.key}`, 'x-shop-id': p.shopId, 'content-type': 'application/json' });
    const env = serviceEnv(
      { databaseUrl: pg.url, brokers: kafka.brokers, apiKeys: producers.map((p) => `${p.key}=${p.shopId}`).join(';') },
      {
        INGEST_RATE_LIMIT_PER_SECOND: String(PER_SECOND),
        INGEST_RATE_LIMIT_PER_MINUTE: String(PER_MINUTE),
        INGEST_RATE_LIMIT_CHUNK: String(CHUNK),
        INGEST_RATE_LIMIT_HOLD_MS: String(HOLD_MS),
      },
    );
    const ingest = startScenarioService(ctx, 'ingest-api', env);
    await untilReady(ingest, 120_000);
    ctx.log('ingest-api ready; neighbours start');

    // The neighbours: open loop, each at neighbourRate, half their events with a contact (a database look-up).
    const pool = new Pool(ingest.baseUrl, { connections: 32, keepAliveTimeout: 30_000 });
    ctx.defer(() => pool.close());
    let phase: 'warm' | (typeof schedule)[number]['label'] = 'warm';
    let windowIndex = -1;
    const samples: Record<string, Sample[]> = { warm: [], baseline: [], burst: [], held: [], limit: [] };
    let withoutHeaders = 0;
    let outsideEnvelope = 0;
    const one = async (n: number, i: number) => {
      const p = phase;
      const window = windowIndex;
      const body = {
        name: `Viewed ${i}`,
        metric: { metric_name: 'viewed_product', value: i },
        ...(i % 2 === 0 ? { contact: { email: `c${i % 200}@n${n}.example.com` } } : {}),
      };
      const t0 = performance.now();
      let status = 'error';
      try {
        const res = await pool.request({
          method: 'POST',
          path: '/v2026-04/events/',
          headers: headersOf(producers[n]),
          body: JSON.stringify(body),
          headersTimeout: 15_000,
          bodyTimeout: 15_000,
        });
        status = String(res.statusCode);
        const text = await res.body.text();
        if (res.statusCode === 202 && !res.headers['ratelimit-policy']) withoutHeaders++;
        if (res.statusCode !== 202) {
          const parsed = jsonOrUndefined(text);
          if (!parsed?.error?.code || !parsed.error.request_id) outsideEnvelope++;
        }
      } catch {
        status = 'error';
      }
      samples[p].push({ ms: performance.now() - t0, status, window });
    };
    let loadOn = true;
    const inflight = new Set<Promise<void>>();
    const load = (async () => {
      const t0 = Date.now();
      let sent = 0;
      while (loadOn) {
        const due = Math.floor(((Date.now() - t0) / 1000) * neighbourRate * neighbours);
        while (sent < due) {
          const i = sent++;
          const p = one(1 + (i % neighbours), Math.floor(i / neighbours));
          inflight.add(p);
          void p.finally(() => inflight.delete(p));
        }
        await new Promise((r) => setTimeout(r, 2));
      }
    })();
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

    await sleep(warmMs);

    // The noisy key: one process of its own running the schedule, announcing each window as it starts; at
    // each window's start the ingest's CPU, event-loop delay and GC time of the window before are taken.
    type Window = { label: string; ms: number; cpu?: CpuUse; loop?: Awaited<ReturnType<typeof loopAndGc>> };
    const windows: Window[] = [];
    let meter: ReturnType<typeof cpuMeter> | undefined;
    let loopBefore = await loopAndGc(ingest.baseUrl);
    const closeWindow = async () => {
      const w = windows.at(-1);
      if (!w || !meter || w.cpu) return;
      w.cpu = meter.stop();
      const l = await loopAndGc(ingest.baseUrl);
      w.loop = { ...l, gcSeconds: round(l.gcSeconds - loopBefore.gcSeconds, 3) };
      loopBefore = l;
    };
    const leasesBefore = await leases(ingest.baseUrl);
    ctx.log(
      `noisy key: ${schedule.map((w) => `${w.label} ${w.rate}/s ${w.ms / 1000} s`).join(', ')}; ${neighbours} neighbours at ${neighbourRate}/s throughout`,
    );
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(ctx.repoRoot, 'faults/src/noisyProducer.ts')], {
      cwd: ctx.repoRoot,
      env: { ...process.env, NOISY_URL: ingest.baseUrl, NOISY_HEADERS: JSON.stringify(headersOf(producers[0])), NOISY_SCHEDULE: JSON.stringify(schedule) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    ctx.defer(() => void (child.exitCode === null && child.kill('SIGKILL')));
    let out = '';
    let buffered = '';
    let windowChange = Promise.resolve();
    child.stdout.on('data', (d) => {
      out += String(d);
      buffered += String(d);
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = JSON.parse(buffered.slice(0, nl)) as { phase?: number; end?: boolean };
        buffered = buffered.slice(nl + 1);
        if (line.end) windowChange = windowChange.then(closeWindow);
        if (line.phase === undefined) continue;
        const w = schedule[line.phase];
        phase = w.label;
        windowIndex = line.phase;
        windowChange = windowChange.then(async () => {
          await closeWindow();
          windows.push({ label: w.label, ms: w.ms });
          meter = cpuMeter({ ingest: ingest.process.pid, harness: process.pid, noisy: child.pid });
        });
      }
    });
    const code = await new Promise<number | null>((r) => child.once('exit', r));
    if (code !== 0) throw new Error(`noisy producer exited ${code}: ${out}`);
    await windowChange;
    const noisy = JSON.parse(out.trim().split('\n').pop()!) as ProducerCounts;
    const leasesAfter = await leases(ingest.baseUrl);
    loadOn = false;
    await load;
    await Promise.allSettled([...inflight]);
    ctx.log(`noisy producer done (${noisy.sent} sent)`);

    const quiet = samples.baseline;
    const lat = (xs: Sample[]) => xs.map((x) => x.ms);
    const statusesOf = (xs: Sample[]) => xs.reduce<Record<string, number>>((a, x) => ((a[x.status] = (a[x.status] ?? 0) + 1), a), {});
    const fmt = (r: Record<string, number>) =>
      Object.entries(r)
        .sort()
        .map(([k, n]) => `${k}: ${n}`)
        .join(', ');
    const measured = [...samples.baseline, ...samples.burst, ...samples.held, ...samples.limit];
    const neighbour429 = measured.filter((x) => x.status === '429').length;
    const neighbour5xx = measured.filter((x) => /^5/.test(x.status) || x.status === 'error').length;
    const noisy5xx = Object.entries(noisy.statuses)
      .filter(([k]) => /^5/.test(k) || k === 'error')
      .reduce((a, [, n]) => a + n, 0);
    const stats = (xs: Sample[]) => ({ n: xs.length, p50: pct(lat(xs), 50), p90: pct(lat(xs), 90), p99: pct(lat(xs), 99), max: Math.max(...lat(xs)) });
    const base = stats(quiet);
    const during = stats(samples.held);
    const atLimit = stats(samples.limit);
    const burst = stats(samples.burst);
    const accepted = noisy.statuses['202'] ?? 0;
    const T = noisy.spanMs / 1000;
    // Both buckets start full: what the limit allows in any T seconds, and that plus the one chunk a replica may hold.
    const allowed = Math.floor(Math.min(PER_SECOND + PER_SECOND * T, PER_MINUTE + (PER_MINUTE / 60) * T));
    const heldIdx = schedule.flatMap((w, i) => (w.label === 'held' ? [i] : []));
    const heldMs = heldIdx.reduce((a, i) => a + schedule[i].ms, 0);
    const heldAccepted = heldIdx.reduce((a, i) => a + (noisy.acceptedByPhase[i] ?? 0), 0);
    const heldAnswers = heldIdx.reduce((a, i) => a + Object.values(noisy.statusesByPhase[i] ?? {}).reduce((x, y) => x + y, 0), 0);
    const leaseDelta = Object.fromEntries(Object.keys({ ...leasesBefore, ...leasesAfter }).map((k) => [k, (leasesAfter[k] ?? 0) - (leasesBefore[k] ?? 0)]));
    const leaseStatements = Object.values(leaseDelta).reduce((a, b) => a + b, 0);
    const ratio = during.p99 / atLimit.p99;
    const ms = (x: number) => round(x, 2);
    // CPU and event loop by label: cores weighted by window length, the worst window's delay, GC summed.
    const byLabel = (label: string) => {
      const ws = windows.filter((w) => w.label === label && w.cpu);
      const total = ws.reduce((a, w) => a + w.ms, 0) || 1;
      const cores = (k: 'ingest' | 'noisy' | 'harness') => round(ws.reduce((a, w) => a + (w.cpu!.processes[k] ?? 0) * w.ms, 0) / total, 2);
      return {
        ingest: cores('ingest'),
        noisy: cores('noisy'),
        harness: cores('harness'),
        others: round(ws.reduce((a, w) => a + w.cpu!.others * w.ms, 0) / total, 2),
        lagP99Ms: Math.max(...ws.map((w) => w.loop?.lagP99Ms ?? 0)),
        lagMaxMs: Math.max(...ws.map((w) => w.loop?.lagMaxMs ?? 0)),
        gcMsPerSecond: round((ws.reduce((a, w) => a + (w.loop?.gcSeconds ?? 0), 0) * 1000) / (total / 1000), 1),
      };
    };
    const cpu = { baseline: byLabel('baseline'), limit: byLabel('limit'), burst: byLabel('burst'), held: byLabel('held') };
    const quietCpu = byLabel('limit');
    const heldCpu = byLabel('held');
    const heldRps = heldAnswers / (heldMs / 1000);
    const shedCostUs = heldRps > 0 ? round(((heldCpu.ingest - quietCpu.ingest) / heldRps) * 1e6, 0) : NaN;
    return {
      versions: { kafka: kafka.version, postgres: pgVersion },
      rows: [
        { measure: 'limit per key and shop', value: `${PER_SECOND}/s burst, ${PER_MINUTE}/min steady`, unit: `(leased in chunks of ${CHUNK})` },
        { measure: 'neighbours', value: `${neighbours} keys at ${neighbourRate}/s each, throughout`, unit: '(half with a contact)' },
        {
          measure: 'the noisy key',
          value: `silent ${windowMs / 1000} s, ${noisyRate}/s for 15 s (burst), then ${cycles} x (${noisyRate}/s ${windowMs / 1000} s held, ${atLimitRate}/s ${windowMs / 1000} s at its limit)`,
          unit: '(single events, one key)',
        },
        { measure: 'noisy: sent', value: noisy.sent, unit: noisy.skipped ? `(${noisy.skipped} not sent: 256 in flight)` : '' },
        { measure: 'noisy: answers by status', value: fmt(noisy.statuses) },
        { measure: 'noisy: accepted (202)', value: accepted, unit: `events in ${round(T)} s` },
        {
          measure: 'noisy: accepted within the limit + one chunk',
          value: `${accepted} ≤ ${allowed} + ${CHUNK}`,
          goal: { text: 'yes', met: accepted <= allowed + CHUNK },
        },
        {
          measure: 'noisy: accepted in the held windows',
          value: round(heldAccepted / (heldMs / 1000)),
          unit: `events/s of ${round(heldRps)} requests/s (steady limit ${round(PER_MINUTE / 60)}/s)`,
        },
        { measure: 'noisy: 429 without Retry-After', value: noisy.withoutRetryAfter, goal: { text: '0', met: noisy.withoutRetryAfter === 0 } },
        {
          measure: 'noisy: 202/429 without RateLimit headers',
          value: noisy.withoutRateLimitHeaders,
          goal: { text: '0', met: noisy.withoutRateLimitHeaders === 0 },
        },
        {
          measure: 'lease statements while noisy',
          value: leaseStatements,
          unit: `(${fmt(leaseDelta)}) for ${noisy.sent + samples.burst.length + samples.held.length} requests`,
        },
        {
          measure: 'neighbours: answers by status',
          value: [quiet, samples.burst, samples.limit, samples.held].map((xs) => fmt(statusesOf(xs))).join(' | '),
          unit: '(noisy key silent | burst | at its limit | held)',
        },
        { measure: 'neighbours: 429', value: neighbour429, goal: { text: '0', met: neighbour429 === 0 } },
        { measure: 'neighbours: 202 without RateLimit headers', value: withoutHeaders, goal: { text: '0', met: withoutHeaders === 0 } },
        {
          measure: 'neighbours: p50 silent / burst / at its limit / held',
          value: `${ms(base.p50)} / ${ms(burst.p50)} / ${ms(atLimit.p50)} / ${ms(during.p50)}`,
          unit: 'ms',
        },
        {
          measure: 'neighbours: p90 silent / burst / at its limit / held',
          value: `${ms(base.p90)} / ${ms(burst.p90)} / ${ms(atLimit.p90)} / ${ms(during.p90)}`,
          unit: 'ms',
        },
        {
          measure: 'neighbours: p99 silent / burst / at its limit / held',
          value: `${ms(base.p99)} / ${ms(burst.p99)} / ${ms(atLimit.p99)} / ${ms(during.p99)}`,
          unit: 'ms',
        },
        {
          measure: 'neighbours: p99 in the burst ÷ silent',
          value: round(burst.p99 / base.p99, 2),
          unit: '(the key spending what its buckets held: load within the limit)',
        },
        {
          measure: 'neighbours: p99 at its limit ÷ silent',
          value: round(atLimit.p99 / base.p99, 2),
          unit: '(the events the limit lets through, 58/s, in chunks of a lease)',
        },
        {
          measure: 'neighbours: p99 with the key sending 2,000/s ÷ at its limit',
          value: round(ratio, 2),
          unit: '(what the requests beyond its limit cost them)',
          goal: { text: '≤ 1.5', met: ratio <= 1.5 },
        },
        {
          measure: 'CPU (cores): ingest-api / noisy producer / harness / rest of the machine',
          value: `at its limit: ${quietCpu.ingest} / ${quietCpu.noisy} / ${quietCpu.harness} / ${quietCpu.others} | held: ${heldCpu.ingest} / ${heldCpu.noisy} / ${heldCpu.harness} / ${heldCpu.others}`,
          unit: `of ${os.cpus().length} cores`,
        },
        { measure: 'ingest-api CPU per request of the held key', value: shedCostUs, unit: 'µs (held minus at its limit, over its requests: mostly 429s)' },
        {
          measure: 'ingest-api event-loop delay p99 / max (worst window), GC',
          value: `at its limit: ${quietCpu.lagP99Ms} / ${quietCpu.lagMaxMs} ms, ${quietCpu.gcMsPerSecond} ms/s | held: ${heldCpu.lagP99Ms} / ${heldCpu.lagMaxMs} ms, ${heldCpu.gcMsPerSecond} ms/s`,
        },
        { measure: '5xx or no answer (all producers)', value: neighbour5xx + noisy5xx, goal: { text: '0', met: neighbour5xx + noisy5xx === 0 } },
        {
          measure: 'answers outside the error envelope',
          value: outsideEnvelope + noisy.outsideEnvelope,
          goal: { text: '0', met: outsideEnvelope + noisy.outsideEnvelope === 0 },
        },
      ],
      details: {
        noisyRate,
        neighbours,
        neighbourRate,
        schedule,
        noisy,
        allowed,
        leasesBefore,
        leasesAfter,
        cpu,
        windows,
        // Each window of the schedule on its own: whether a p99 above comes from all its windows or from one.
        neighbourLatencyByWindowMs: schedule.map((w, i) => {
          const xs = Object.values(samples)
            .flat()
            .filter((x) => x.window === i);
          return { label: w.label, n: xs.length, p99: ms(pct(lat(xs), 99)), max: ms(Math.max(...lat(xs))), over50ms: xs.filter((x) => x.ms > 50).length };
        }),
        neighbourStatuses: { quiet: statusesOf(quiet), burst: statusesOf(samples.burst), limit: statusesOf(samples.limit), held: statusesOf(samples.held) },
        neighbourLatencyMs: Object.fromEntries(
          Object.entries({ quiet: base, burst, limit: atLimit, held: during }).map(([k, v]) => [
            k,
            { n: v.n, p50: ms(v.p50), p90: ms(v.p90), p99: ms(v.p99), max: ms(v.max) },
          ]),
        ),
      },
      notes: [
        `ingest-api as a separate process on its own broker and PostgreSQL, INGEST_RATE_LIMIT_PER_SECOND=${PER_SECOND}, INGEST_RATE_LIMIT_PER_MINUTE=${PER_MINUTE}, chunks of ${CHUNK}. ` +
          `The noisy producer is a process of its own (open loop, at most 256 requests in flight); the neighbours run from the harness process throughout, which times them.`,
        `The noisy key is silent for ${windowMs / 1000} s, then sends ${noisyRate}/s for 15 s, spending what its buckets held (up to ${PER_SECOND}/s until the steady bucket is empty: load within the limit, "burst"), ` +
          `then alternates ${windowMs / 1000} s at ${noisyRate}/s ("held": answered 429 beyond its steady limit, each 429 of the shed path held ${HOLD_MS / 2}-${HOLD_MS} ms) with ${windowMs / 1000} s at ${atLimitRate}/s ("at its limit"), ${cycles} times, so the machine's other load falls on both alike. ` +
          `Both let through the same events (the steady limit); the latency goal compares the neighbours in the two, so it measures what the requests beyond the limit cost them.`,
        `The noisy key's buckets start full: in ${round(T)} s the limit allows at most min(${PER_SECOND} + ${PER_SECOND}/s, ${PER_MINUTE} + ${round(PER_MINUTE / 60)}/s) = ${allowed} events; a replica may hold one more chunk.`,
      ],
    };
  },
};
