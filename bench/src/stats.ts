/** Latency samples in milliseconds; percentiles by sorting, which is exact and cheap at bench sizes. */
export class Samples {
  private values: number[] = [];

  add(ms: number): void {
    this.values.push(ms);
  }

  get count(): number {
    return this.values.length;
  }

  summary(): LatencySummary {
    return summarize(this.values);
  }
}

export interface LatencySummary {
  count: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
}

export function summarize(values: number[]): LatencySummary {
  if (values.length === 0) return { count: 0, mean: NaN, p50: NaN, p90: NaN, p99: NaN, p999: NaN, max: NaN };
  const sorted = Float64Array.from(values).sort();
  // Nearest-rank: the smallest sample with at least q of the samples at or below it.
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    count: sorted.length,
    mean: round(sum / sorted.length),
    p50: round(at(0.5)),
    p90: round(at(0.9)),
    p99: round(at(0.99)),
    p999: round(at(0.999)),
    max: round(sorted[sorted.length - 1]),
  };
}

export const round = (x: number, digits = 2): number => (Number.isFinite(x) ? Number(x.toFixed(digits)) : x);

/** Wall-clock milliseconds since the epoch with sub-millisecond resolution, comparable across processes. */
export const epochMs = (): number => performance.timeOrigin + performance.now();

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
