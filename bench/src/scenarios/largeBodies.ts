import type { Bench } from '../context.js';
import { setPriority } from 'node:os';
import { spawnChild } from '../children.js';
import type { LargeBodiesResult, LargeBodiesSpec } from '../largeBodiesLoad.js';
import { scrapeBuckets, scrapeHistograms } from '../promMetrics.js';
import type { Row, ScenarioResult } from '../report.js';

const SMALL_LOOPS = 4;
const BULK_LOOPS = 20;
/** Pairs of phases (alone, beside), alternated: the machine is shared and noisy. */
const PAIRS = Number(process.env.BENCH_LARGE_BODIES_PAIRS ?? 3);
/** BENCH_LARGE_BODIES_ABUSER_NICE: the bulk loops' process at this nice value (its own process only). */
const ABUSER_NICE = Number(process.env.BENCH_LARGE_BODIES_ABUSER_NICE ?? 0);

/** The server's own latency histogram of single-event 202s (shopstream_http_request_seconds), cumulative by bucket, or another histogram's (all its series). */
const smallBuckets = (baseUrl: string, metric = 'shopstream_http_request_seconds'): Promise<Map<string, number>> =>
  metric === 'shopstream_http_request_seconds'
    ? scrapeBuckets(baseUrl, metric, (labels) => labels.includes('status="202"') && /route="[^"]*\/events\/"/.test(labels))
    : scrapeBuckets(baseUrl, metric);

/** Of the single-event 202s between two scrapes: how many the server took over 10, 25 and 50 ms to answer. */
function serverSlow(before: Map<string, number>, after: Map<string, number>): { count: number; over10ms: number; over25ms: number; over50ms: number } {
  const d = (le: string) => (after.get(le) ?? 0) - (before.get(le) ?? 0);
  const count = d('+Inf');
  return { count, over10ms: count - d('0.01'), over25ms: count - d('0.025'), over50ms: count - d('0.05') };
}

/** The main thread's garbage collections by kind (prom-client's nodejs_gc_duration_seconds): count and total ms. */
async function gcTotals(baseUrl: string): Promise<Record<string, { count: number; ms: number }>> {
  const { byLabel } = (await scrapeHistograms(baseUrl, ['nodejs_gc_duration_seconds'])).nodejs_gc_duration_seconds;
  return Object.fromEntries(
    Object.entries(byLabel).map(([labels, h]) => [/kind="([^"]+)"/.exec(labels)?.[1] ?? labels, { count: h.count, ms: h.sumSeconds * 1000 }]),
  );
}

/** What the main thread's collections took between two scrapes: in all (ms), and `kind n / ms` for each kind seen. */
function gcBetween(before: Awaited<ReturnType<typeof gcTotals>>, after: Awaited<ReturnType<typeof gcTotals>>): { ms: number; kinds: string } {
  const kinds = Object.entries(after)
    .map(([kind, a]) => ({ kind, n: a.count - (before[kind]?.count ?? 0), ms: a.ms - (before[kind]?.ms ?? 0) }))
    .filter((g) => g.n > 0);
  return {
    ms: Number(kinds.reduce((t, g) => t + g.ms, 0).toFixed(0)),
    kinds: kinds.map((g) => `${g.kind} ${g.n} / ${g.ms.toFixed(0)} ms`).join(', '),
  };
}

/**
 * Issue 22's "Abuse costs the abuser", large bodies: the p99 of small single-event requests from 4 loops, alone,
 * then beside 20 loops each POSTing a maximum-size bulk (~5.9 MB) back to back; the goal is at most 2x. One
 * ingest-api process (its env from BENCH_LARGE_BODIES_ENV, e.g. `INGEST_BODY_WORKERS=0` for the event-loop path),
 * `--duration` seconds per phase.
 */
export async function largeBodies(b: Bench): Promise<ScenarioResult> {
  const extra = Object.fromEntries(
    (process.env.BENCH_LARGE_BODIES_ENV ?? '')
      .split(/\s+/)
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
  );
  const { child, baseUrl } = await b.server(['ingest-api'], extra);
  // The measured small loops and the abusive bulk loops run in processes of their own (BENCH_LARGE_BODIES_ONE_CLIENT=1:
  // one process, as before): in one, writing 20 bodies of 5.9 MB held the client's own event loop, and the small
  // requests' latency measured the client's stalls beside the server's.
  const oneClient = process.env.BENCH_LARGE_BODIES_ONE_CLIENT === '1';
  // The small requests come from another shop than the bulks (BENCH_LARGE_BODIES_SAME_SHOP=1: the same one): what is
  // measured is what one producer's abuse costs the others; records are keyed by shop, so the abuser's records
  // share a partition with its own small ones, not (as a rule) with another shop's.
  const sameShop = process.env.BENCH_LARGE_BODIES_SAME_SHOP === '1';
  // Processes started and ready first, then told to run together: the small loops never start before the bulks.
  const loads = async (specs: { small: number; bulks: number }[]): Promise<LargeBodiesResult[]> => {
    const gens = specs.map(({ small }) => spawnChild(small > 0 ? 'load-small' : 'load-bulks', 'largeBodiesLoad.ts'));
    try {
      specs.forEach(({ small }, i) => {
        if (small === 0 && ABUSER_NICE > 0) setPriority(gens[i].pid, ABUSER_NICE);
      });
      await Promise.all(gens.map((gen) => gen.next('ready', 60_000)));
      specs.forEach(({ small, bulks }, i) => {
        const spec: LargeBodiesSpec = {
          baseUrl,
          shopId: b.shops[0].shopId,
          smallShopId: b.shops[sameShop ? 0 : 1].shopId,
          key: b.shops[0].key,
          durationMs: b.opts.durationMs,
          small,
          bulks,
        };
        gens[i].send({ type: 'run', spec });
      });
      return await Promise.all(gens.map(async (gen) => (await gen.next<{ result: LargeBodiesResult }>('result', b.opts.durationMs + 120_000)).result));
    } finally {
      await Promise.all(gens.map((gen) => gen.stop(5_000)));
    }
  };
  const phase = async (
    bulks: number,
  ): Promise<LargeBodiesResult & { server: ReturnType<typeof serverSlow>; sends: ReturnType<typeof serverSlow>; gc: ReturnType<typeof gcBetween> }> => {
    const gcBefore = await gcTotals(baseUrl);
    const before = await smallBuckets(baseUrl);
    const sendsBefore = await smallBuckets(baseUrl, 'shopstream_kafka_send_seconds');
    let r: LargeBodiesResult;
    if (oneClient || bulks === 0) [r] = await loads([{ small: SMALL_LOOPS, bulks }]);
    else {
      const [small, large] = await loads([
        { small: SMALL_LOOPS, bulks: 0 },
        { small: 0, bulks },
      ]);
      r = { ...small, bulkStatuses: large.bulkStatuses, bulkBytes: large.bulkBytes, bulkLatency: large.bulkLatency };
    }
    return {
      ...r,
      server: serverSlow(before, await smallBuckets(baseUrl)),
      sends: serverSlow(sendsBefore, await smallBuckets(baseUrl, 'shopstream_kafka_send_seconds')),
      gc: gcBetween(gcBefore, await gcTotals(baseUrl)),
    };
  };
  // Warm up: the server's first requests (and its first large body's worker) are not measured.
  await phase(0);
  const rows: Row[] = [];
  const pairs: { alone: Awaited<ReturnType<typeof phase>>; beside: Awaited<ReturnType<typeof phase>> }[] = [];
  for (let i = 1; i <= PAIRS; i++) {
    const alone = await phase(0);
    const beside = await phase(BULK_LOOPS);
    pairs.push({ alone, beside });
    const ratio = beside.small.p99 / alone.small.p99;
    rows.push(
      { measure: `pair ${i}: small p50 alone / beside`, value: alone.small.p50, unit: `ms / ${beside.small.p50} ms` },
      { measure: `pair ${i}: small p99 alone`, value: alone.small.p99, unit: 'ms' },
      { measure: `pair ${i}: small p99 beside ${BULK_LOOPS} bulk loops`, value: beside.small.p99, unit: 'ms' },
      { measure: `pair ${i}: ratio`, value: Number(ratio.toFixed(2)), unit: 'x', budget: { text: '<= 2', met: ratio <= 2 } },
      {
        measure: `pair ${i}: bulks taken (200) / 503`,
        value: beside.bulkStatuses['200'] ?? 0,
        unit: `/ ${beside.bulkStatuses['503'] ?? 0} (small requests: ${beside.small.count}, non-202: ${beside.small.count - (beside.smallStatuses['202'] ?? 0)})`,
      },
      {
        measure: `pair ${i}: small answered by the server in over 10 / 25 / 50 ms, alone`,
        value: alone.server.over10ms,
        unit: `/ ${alone.server.over25ms} / ${alone.server.over50ms} of ${alone.server.count}`,
      },
      {
        measure: `pair ${i}: small answered by the server in over 10 / 25 / 50 ms, beside`,
        value: beside.server.over10ms,
        unit: `/ ${beside.server.over25ms} / ${beside.server.over50ms} of ${beside.server.count}`,
      },
      {
        measure: `pair ${i}: Kafka sends of the request thread over 10 / 25 / 50 ms, alone / beside`,
        value: alone.sends.over10ms,
        unit: `/ ${alone.sends.over25ms} / ${alone.sends.over50ms} of ${alone.sends.count}; ${beside.sends.over10ms} / ${beside.sends.over25ms} / ${beside.sends.over50ms} of ${beside.sends.count}`,
      },
      { measure: `pair ${i}: the server's main-thread GC in the phase, alone`, value: alone.gc.ms, unit: `ms (${alone.gc.kinds || 'none'})` },
      { measure: `pair ${i}: the server's main-thread GC in the phase, beside`, value: beside.gc.ms, unit: `ms (${beside.gc.kinds || 'none'})` },
    );
  }
  await b.stopChild(child);
  return {
    scenario: 'large-bodies',
    rows,
    details: { env: extra, oneClient, sameShop, smallLoops: SMALL_LOOPS, bulkLoops: BULK_LOOPS, pairs },
    notes: [`${SMALL_LOOPS} small loops alone, then beside ${BULK_LOOPS} loops of ~${(pairs[0]?.beside.bulkBytes / 1e6).toFixed(1)} MB bulks, ${PAIRS} pairs.`],
  };
}
