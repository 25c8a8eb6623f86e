/** One slice of time and the answers given in it, by status. */
export interface AnswerBucket {
  /** Its start, ISO 8601. */
  start: string;
  seconds: number;
  /** Answers by status code, e.g. `{"202": 1200, "503": 4}`. */
  counts: Record<string, number>;
}

/**
 * Answers of some routes counted by status in slices of `bucketMs`, the last `buckets` of them kept: the
 * status page's "answers per second over the last minutes" without Prometheus. One Map look-up per answer;
 * nothing runs between answers. The clock is injected so tests drive it.
 */
export class AnswerRates {
  private readonly ring: { start: number; counts: Map<string, number> }[] = [];

  constructor(
    readonly bucketMs = 10_000,
    readonly buckets = 30,
    private readonly now: () => number = Date.now,
  ) {}

  record(status: number | string): void {
    const start = Math.floor(this.now() / this.bucketMs) * this.bucketMs;
    let last = this.ring[this.ring.length - 1];
    if (!last || last.start !== start) {
      last = { start, counts: new Map() };
      this.ring.push(last);
      if (this.ring.length > this.buckets) this.ring.shift();
    }
    const key = String(status);
    last.counts.set(key, (last.counts.get(key) ?? 0) + 1);
  }

  /**
   * The last `buckets` slices, oldest first, the current one included (it is partial), slices with no answer
   * as empty counts.
   */
  snapshot(): AnswerBucket[] {
    const current = Math.floor(this.now() / this.bucketMs) * this.bucketMs;
    const byStart = new Map(this.ring.map((b) => [b.start, b.counts]));
    const out: AnswerBucket[] = [];
    for (let i = this.buckets - 1; i >= 0; i--) {
      const start = current - i * this.bucketMs;
      out.push({ start: new Date(start).toISOString(), seconds: this.bucketMs / 1000, counts: Object.fromEntries(byStart.get(start) ?? []) });
    }
    return out;
  }
}

/** The ingest API's answers (POST /v2026-04/events/ and /events/bulk/, shed answers included) in this process. */
export const ingestAnswers = new AnswerRates();

const INGEST_ROUTE_PREFIX = '/v2026-04/events/';
/** Counts an answer in ingestAnswers when its route template is one of the ingest API's. */
export function countIngestAnswer(route: string, status: number): void {
  if (route.startsWith(INGEST_ROUTE_PREFIX)) ingestAnswers.record(status);
}
