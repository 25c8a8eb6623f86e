/**
 * The load of the `large-bodies` scenario (issue 22, "Abuse costs the abuser"), in a process of its own: `small`
 * loops each POSTing one small event after another (their latency is what is measured), beside `bulks` loops each
 * POSTing a maximum-size bulk body (100 events x 200 properties nested 15 deep, about 5.9 MB) after another.
 * The parent sends one `{type: 'run', spec}`; this answers `{type: 'result', result}` and exits.
 */
import { Pool } from 'undici';
import { failChild } from './children.js';
import { epochMs, summarize, type LatencySummary } from './stats.js';

export interface LargeBodiesSpec {
  baseUrl: string;
  /** The bulks' shop. */
  shopId: string;
  /** The small requests' shop. */
  smallShopId: string;
  key: string;
  durationMs: number;
  small: number;
  bulks: number;
}

export interface LargeBodiesResult {
  small: LatencySummary;
  smallStatuses: Record<string, number>;
  bulkStatuses: Record<string, number>;
  bulkBytes: number;
  bulkLatency: LatencySummary;
}

/** One property value nested `depth` containers deep under the additional_properties object (which is the first). */
function nested(depth: number, leaf: string): unknown {
  let v: unknown = leaf;
  for (let i = 1; i < depth; i++) v = { a: v };
  return v;
}

/** The maximum-size bulk of the issue: 100 events, each with 200 properties nested 15 deep (under 64 KiB each). */
export function maximalBulk(): string {
  const props: Record<string, unknown> = {};
  for (let p = 0; p < 200; p++) props[`p${p}`] = nested(15, 'x'.repeat(180));
  const events = Array.from({ length: 100 }, (_, i) => ({
    name: `Bulk event ${i}`,
    metric: { metric_name: 'bulk_abuse', value: i, additional_properties: props },
  }));
  return JSON.stringify({ events });
}

// Built and encoded once, before the process says it is ready (a string body would be encoded again on every send).
const bulk = Buffer.from(maximalBulk());

async function run(spec: LargeBodiesSpec): Promise<LargeBodiesResult> {
  const headersOf = (shopId: string) => ({ authorization: `Bearer ${spec.key}`, 'x-shop-id': shopId, 'content-type': 'application/json' });
  const small = new Pool(spec.baseUrl, { connections: Math.max(1, spec.small), pipelining: 1 });
  const large = new Pool(spec.baseUrl, { connections: Math.max(1, spec.bulks), pipelining: 1 });
  const smallBody = JSON.stringify({ name: 'Small event', metric: { metric_name: 'small', value: 1 } });
  const latencies: number[] = [];
  const bulkLatencies: number[] = [];
  const smallStatuses: Record<string, number> = {};
  const bulkStatuses: Record<string, number> = {};
  const count = (m: Record<string, number>, k: string) => (m[k] = (m[k] ?? 0) + 1);
  const end = epochMs() + spec.durationMs;
  const loop = async (pool: Pool, shopId: string, path: string, body: string | Buffer, into: number[], statuses: Record<string, number>) => {
    while (epochMs() < end) {
      const t0 = epochMs();
      try {
        const res = await pool.request({ method: 'POST', path, headers: headersOf(shopId), body });
        await res.body.dump();
        into.push(epochMs() - t0);
        count(statuses, String(res.statusCode));
      } catch (e) {
        count(statuses, (e as { code?: string }).code ?? 'error');
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  };
  await Promise.all([
    ...Array.from({ length: spec.small }, () => loop(small, spec.smallShopId, '/v2026-04/events/', smallBody, latencies, smallStatuses)),
    ...Array.from({ length: spec.bulks }, () => loop(large, spec.shopId, '/v2026-04/events/bulk/', bulk, bulkLatencies, bulkStatuses)),
  ]);
  await Promise.all([small.close(), large.close()]);
  return { small: summarize(latencies), smallStatuses, bulkStatuses, bulkBytes: bulk.length, bulkLatency: summarize(bulkLatencies) };
}

process.once('message', (m: any) => {
  if (m?.type !== 'run') return;
  run(m.spec as LargeBodiesSpec).then(
    (result) => process.send!({ type: 'result', result }, () => process.exit(0)),
    (e) => failChild(e),
  );
});
process.send!({ type: 'ready' });
