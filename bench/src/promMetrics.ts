import { request } from 'undici';
import { LAG_INTERVAL_MS } from '@shopstream/projections';

export interface HistogramTotals {
  count: number;
  sumSeconds: number;
  meanMs: number;
}

/**
 * The service's own histograms from its /metrics (Prometheus text), summed over labels: how many Kafka
 * sends, consumer batches or requests it made and their mean time. Evidence for where time goes.
 */
export async function scrapeHistograms(
  baseUrl: string,
  names: string[],
): Promise<Record<string, HistogramTotals & { byLabel: Record<string, HistogramTotals> }>> {
  const res = await request(`${baseUrl}/metrics`);
  const text = await res.body.text();
  const out: Record<string, HistogramTotals & { byLabel: Record<string, HistogramTotals> }> = {};
  for (const name of names) {
    const byLabel: Record<string, HistogramTotals> = {};
    let count = 0;
    let sum = 0;
    for (const line of text.split('\n')) {
      const m = new RegExp(`^${name}_(sum|count)(\\{[^}]*\\})? ([0-9.e+-]+)$`).exec(line);
      if (!m) continue;
      const labels = m[2] ?? '{}';
      const entry = (byLabel[labels] ??= { count: 0, sumSeconds: 0, meanMs: 0 });
      if (m[1] === 'sum') {
        entry.sumSeconds += Number(m[3]);
        sum += Number(m[3]);
      } else {
        entry.count += Number(m[3]);
        count += Number(m[3]);
      }
    }
    for (const e of Object.values(byLabel)) e.meanMs = e.count ? Number(((1000 * e.sumSeconds) / e.count).toFixed(2)) : 0;
    out[name] = { count, sumSeconds: Number(sum.toFixed(3)), meanMs: count ? Number(((1000 * sum) / count).toFixed(2)) : 0, byLabel };
  }
  return out;
}

/**
 * One histogram's cumulative buckets from the service's /metrics, by `le`, summed over the series whose labels
 * `keep` accepts (all of them when absent).
 */
export async function scrapeBuckets(baseUrl: string, name: string, keep: (labels: string) => boolean = () => true): Promise<Map<string, number>> {
  const text = await (await request(`${baseUrl}/metrics`)).body.text();
  const bucket = new RegExp(`^${name}_bucket\\{(.*)\\} ([0-9.e+-]+)$`);
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = bucket.exec(line);
    if (!m || !keep(m[1])) continue;
    const le = /le="([^"]+)"/.exec(m[1])![1];
    out.set(le, (out.get(le) ?? 0) + Number(m[2]));
  }
  return out;
}

export const SERVICE_HISTOGRAMS = ['shopstream_kafka_send_seconds', 'shopstream_http_request_seconds', 'shopstream_consumer_batch_seconds'];

/** A gauge's series from the service's /metrics, summed: undefined when it has none. */
export async function scrapeGaugeSum(baseUrl: string, name: string): Promise<number | undefined> {
  const text = await (await request(`${baseUrl}/metrics`)).body.text();
  const series = new RegExp(`^${name}(\\{[^}]*\\})? ([0-9.e+-]+)$`);
  let sum: number | undefined;
  for (const line of text.split('\n')) {
    const m = series.exec(line);
    if (m) sum = (sum ?? 0) + Number(m[2]);
  }
  return sum;
}

/**
 * Waits until a process's consumers have worked off what the load before left them: its shopstream_consumer_lag
 * summed over every group and partition is 0, and still 0 a lag reading later (the gauge is read every 5 s, so
 * the first 0 seen may be older than the load's end). So that the next phase measures its own load, not the
 * consumers catching up on the last one's. `seconds`: from the call to the first 0 seen (up to one reading late);
 * `caughtUp` false when the lag was still above 0 after `timeoutMs`, or the process reported none.
 */
export async function consumersCaughtUp(baseUrl: string, timeoutMs = 180_000): Promise<{ caughtUp: boolean; seconds: number; lagAtStart: number | null }> {
  const t0 = performance.now();
  let zeroSince: number | undefined;
  let lagAtStart: number | null = null;
  for (let first = true; ; first = false) {
    const lag = await scrapeGaugeSum(baseUrl, 'shopstream_consumer_lag');
    const now = performance.now();
    if (first) lagAtStart = lag ?? null;
    if (lag === 0) {
      zeroSince ??= now;
      if (now - zeroSince > LAG_INTERVAL_MS + 1_000) return { caughtUp: true, seconds: Number(((zeroSince - t0) / 1000).toFixed(1)), lagAtStart };
    } else zeroSince = undefined;
    // No gauge at all after two readings' time: the process reads no lag (nothing to wait for that can be seen).
    if ((lag === undefined && now - t0 > 2 * LAG_INTERVAL_MS + 1_000) || now - t0 > timeoutMs)
      return { caughtUp: false, seconds: Number(((now - t0) / 1000).toFixed(1)), lagAtStart };
    await new Promise((r) => setTimeout(r, 500));
  }
}
