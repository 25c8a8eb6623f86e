import type { Bench } from '../context.js';
import { spawnChild } from '../children.js';
import type { LargeBodiesResult, LargeBodiesSpec } from '../largeBodiesLoad.js';
import type { Row, ScenarioResult } from '../report.js';

const SMALL_LOOPS = 4;
const BULK_LOOPS = 20;
/** Pairs of phases (alone, beside), alternated: the machine is shared and noisy. */
const PAIRS = Number(process.env.BENCH_LARGE_BODIES_PAIRS ?? 3);

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
  const phase = async (bulks: number): Promise<LargeBodiesResult> => {
    const gen = spawnChild('load-large-bodies', 'largeBodiesLoad.ts');
    try {
      await gen.next('ready', 60_000);
      const spec: LargeBodiesSpec = { baseUrl, shopId: b.shops[0].shopId, key: b.shops[0].key, durationMs: b.opts.durationMs, small: SMALL_LOOPS, bulks };
      gen.send({ type: 'run', spec });
      return (await gen.next<{ result: LargeBodiesResult }>('result', b.opts.durationMs + 120_000)).result;
    } finally {
      await gen.stop(5_000);
    }
  };
  // Warm up: the server's first requests (and its first large body's worker) are not measured.
  await phase(0);
  const rows: Row[] = [];
  const pairs: { alone: LargeBodiesResult; beside: LargeBodiesResult }[] = [];
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
    );
  }
  await b.stopChild(child);
  return {
    scenario: 'large-bodies',
    rows,
    details: { env: extra, smallLoops: SMALL_LOOPS, bulkLoops: BULK_LOOPS, pairs },
    notes: [`${SMALL_LOOPS} small loops alone, then beside ${BULK_LOOPS} loops of ~${(pairs[0]?.beside.bulkBytes / 1e6).toFixed(1)} MB bulks, ${PAIRS} pairs.`],
  };
}
