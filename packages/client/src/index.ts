/**
 * @shopstream/client: a typed client for Shopstream's HTTP API, with no runtime dependency beyond `fetch`.
 * The types come from the same zod contracts the server validates with (imported as types only).
 */
import type { z } from 'zod';
import type {
  Activity,
  BulkResultItem,
  Conversation,
  ErrorBody,
  EventAccepted,
  Flow,
  FlowTriggerEntry,
  eventInputSchema,
  exportQuerySchema,
  flowCreateSchema,
  flowUpdateSchema,
} from '@shopstream/contracts';
import type { DeletionJob, DeletionJobAccepted } from '@shopstream/contracts';

/** An event as a producer sends it (`POST /v2026-04/events/`). */
export type EventInput = z.input<typeof eventInputSchema>;
export type FlowCreateInput = z.input<typeof flowCreateSchema>;
export type FlowUpdateInput = z.input<typeof flowUpdateSchema>;
/** Filters of the conversation export, as query parameters (`created_at__range`, `status`, `tags__in`, ...). */
export type ExportParams = Omit<z.input<typeof exportQuerySchema>, 'cursor'>;
export type { Activity, BulkResultItem, Conversation, EventAccepted, Flow, FlowTriggerEntry };

export interface ShopstreamClientOptions {
  /** Where the service answers, e.g. `http://localhost:8080` (the `/v2026-04` prefix is added). */
  baseUrl: string;
  apiKey: string;
  shopId: string;
  /** Attempts after the first for a request answered 429, 5xx or not at all. Default 5. */
  retries?: number;
  /** Backoff bounds when no Retry-After is given: full jitter between 0 and min(max, min * 2^attempt). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** A 429's or 503's Retry-After longer than this fails the request instead of waiting. Default 120 s. */
  maxRetryAfterMs?: number;
  /** track(): flush when this many events are queued (at most 100 per request anyway). Default 100. */
  flushAt?: number;
  /** track(): flush at most this long after the first queued event. Default 1,000 ms. */
  flushIntervalMs?: number;
  /** track(): told about events a flush could not deliver (after its retries). Default: written to stderr. */
  onError?: (error: Error, events: EventInput[]) => void;
  /** A fetch of your own (a proxy agent, instrumentation). Default: the global fetch. */
  fetch?: typeof fetch;
}

/** An error answer of the API (or the last one, after retries), with its error body. */
export class ShopstreamError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly requestId: string | null,
    readonly fields: Record<string, unknown> = {},
  ) {
    super(`${status} ${code}: ${message}`);
    this.name = 'ShopstreamError';
  }
}

const PREFIX = '/v2026-04';
const MAX_BULK_EVENTS = 100;
/** The bulk endpoint takes 10 MiB; a request of the client stays at 1 MiB so one slow request never holds much. */
const MAX_BULK_BYTES = 1024 * 1024;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A random id for the events track() sends without a key of their own: a retried batch then replays, never doubles. */
const randomKey = (): string => globalThis.crypto.randomUUID();

export class ShopstreamClient {
  private readonly opts: Required<Omit<ShopstreamClientOptions, 'onError' | 'fetch'>> & Pick<ShopstreamClientOptions, 'onError'>;
  private readonly doFetch: typeof fetch;
  private queue: EventInput[] = [];
  private timer: ReturnType<typeof setTimeout> | null = null;
  private flushing: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(options: ShopstreamClientOptions) {
    this.opts = {
      retries: 5,
      minBackoffMs: 200,
      maxBackoffMs: 10_000,
      maxRetryAfterMs: 120_000,
      flushAt: 100,
      flushIntervalMs: 1_000,
      ...options,
      baseUrl: options.baseUrl.replace(/\/+$/, ''),
    };
    this.doFetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** Records one event; resolves once the service's log holds it. A replay (same key) answers the same activity id. */
  async recordEvent(event: EventInput): Promise<EventAccepted> {
    return (await this.request<EventAccepted>('POST', '/events/', event)).body;
  }

  /**
   * Records any number of events: split into requests of at most 100 events and 1 MiB, sent one after the
   * other; the results come back one per event, in input order, with `index` its position in `events`.
   */
  async recordEvents(events: EventInput[]): Promise<BulkResultItem[]> {
    const results: BulkResultItem[] = [];
    for (const chunk of splitEvents(events)) {
      const { body } = await this.request<{ results: BulkResultItem[] }>('POST', '/events/bulk/', { events: chunk.events });
      for (const r of body.results) results.push({ ...r, index: chunk.start + r.index });
    }
    return results;
  }

  /**
   * Queues an event and returns at once; the queue is sent in bulk when it holds `flushAt` events, `flushIntervalMs`
   * after the first one, and on flush()/close(). Events without a `remote_id` or `deduping_key` get a random
   * `metric.deduping_key`, so a retried request replays them instead of recording them twice.
   */
  track(event: EventInput): void {
    if (this.closed) throw new Error('ShopstreamClient: track() after close()');
    const keyed = event.remote_id != null || event.metric.deduping_key !== undefined;
    this.queue.push(keyed ? event : { ...event, metric: { ...event.metric, deduping_key: randomKey() } });
    if (this.queue.length >= this.opts.flushAt) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), this.opts.flushIntervalMs);
  }

  /** Sends what track() queued; resolves when it was delivered (or reported to onError). */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const batch = this.queue;
    this.queue = [];
    // Flushes run one after the other: events keep their order per key.
    this.flushing = this.flushing.then(async () => {
      if (batch.length === 0) return;
      try {
        const results = await this.recordEvents(batch);
        const failed = results.filter((r) => r.status === 'error');
        if (failed.length > 0) {
          const first = failed[0] as Extract<BulkResultItem, { status: 'error' }>;
          this.report(
            new ShopstreamError(
              400,
              first.error.code,
              `${failed.length} of ${batch.length} events refused: ${first.error.message}`,
              first.error.request_id,
              first.error.fields,
            ),
            failed.map((f) => batch[f.index]),
          );
        }
      } catch (e) {
        this.report(e as Error, batch);
      }
    });
    return this.flushing;
  }

  /** Flushes and stops taking events. */
  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
  }

  getActivity(id: string): Promise<Activity> {
    return this.request<Activity>('GET', `/activities/${encodeURIComponent(id)}/`).then((r) => r.body);
  }

  /** The workspace's activities (without a contact), newest first, every page. */
  listActivities(params: { limit?: number } = {}): AsyncIterable<Activity> {
    return this.pages<Activity>(`/activities/?${query({ scope: 'workspace', ...params })}`);
  }

  /** A contact's timeline, newest event_time first, every page. */
  contactTimeline(contactId: string, params: { limit?: number } = {}): AsyncIterable<Activity> {
    return this.pages<Activity>(`/contacts/${encodeURIComponent(contactId)}/timeline/?${query(params)}`);
  }

  createFlow(flow: FlowCreateInput): Promise<Flow> {
    return this.request<Flow>('POST', '/flows/', flow).then((r) => r.body);
  }

  listFlows(params: { status?: 'active' | 'paused'; limit?: number } = {}): AsyncIterable<Flow> {
    return this.pages<Flow>(`/flows/?${query(params)}`);
  }

  getFlow(id: string): Promise<Flow> {
    return this.request<Flow>('GET', `/flows/${encodeURIComponent(id)}/`).then((r) => r.body);
  }

  updateFlow(id: string, change: FlowUpdateInput): Promise<Flow> {
    return this.request<Flow>('PATCH', `/flows/${encodeURIComponent(id)}/`, change).then((r) => r.body);
  }

  async deleteFlow(id: string): Promise<void> {
    await this.request('DELETE', `/flows/${encodeURIComponent(id)}/`);
  }

  flowTriggers(flowId: string, params: { limit?: number } = {}): AsyncIterable<FlowTriggerEntry> {
    return this.pages<FlowTriggerEntry>(`/flows/${encodeURIComponent(flowId)}/triggers/?${query(params)}`);
  }

  /**
   * Every conversation the filters select, oldest first, following `next` to the end. A 429 (60 requests a
   * minute per key and shop) is waited out, as its Retry-After says.
   */
  exportConversations(params: ExportParams = {}): AsyncIterable<Conversation> {
    return this.pages<Conversation>(`/conversations/export/?${query(params as Record<string, unknown>)}`);
  }

  /**
   * Erases a person (docs/privacy.md): queues a deletion job for exactly one identifier; the job runs in the
   * background. Follow it with waitForDeletion.
   */
  requestDeletion(identifier: { email: string } | { phone: string } | { remote_id: string } | { contact_id: string }): Promise<DeletionJobAccepted> {
    return this.request<DeletionJobAccepted>('POST', '/data-privacy/deletion-jobs/', identifier).then((r) => r.body);
  }

  /** Waits until a deletion job is completed or failed (polling every intervalMs, default 1 s) and gives it; throws after timeoutMs (default 10 min). */
  async waitForDeletion(id: string, opts: { intervalMs?: number; timeoutMs?: number } = {}): Promise<DeletionJob> {
    const deadline = Date.now() + (opts.timeoutMs ?? 600_000);
    for (;;) {
      const job = (await this.request<DeletionJob>('GET', `/data-privacy/deletion-jobs/${encodeURIComponent(id)}/`)).body;
      if (job.status === 'completed' || job.status === 'failed') return job;
      if (Date.now() >= deadline) throw new Error(`deletion job ${id} is still ${job.status} after ${opts.timeoutMs ?? 600_000} ms`);
      await new Promise((r) => setTimeout(r, opts.intervalMs ?? 1_000));
    }
  }

  private async *pagesOf<T>(first: string): AsyncGenerator<T> {
    let url: string | null = first;
    while (url) {
      const page: { results: T[]; next: string | null } = (await this.request<{ results: T[]; next: string | null }>('GET', url)).body;
      yield* page.results;
      url = page.next;
    }
  }

  private pages<T>(first: string): AsyncIterable<T> {
    return { [Symbol.asyncIterator]: () => this.pagesOf<T>(first) };
  }

  private report(error: Error, events: EventInput[]): void {
    if (this.opts.onError) this.opts.onError(error, events);
    else console.error(`@shopstream/client: ${events.length} events not delivered: ${error.message}`);
  }

  /**
   * One API call with retries: a 429 or 503 after its Retry-After, other 5xx and network failures after a
   * jittered backoff; never a 4xx other than 429 (the request itself is wrong: sending it again cannot help).
   */
  private async request<T>(method: string, pathOrUrl: string, body?: unknown): Promise<{ status: number; body: T }> {
    const url = /^https?:\/\//.test(pathOrUrl) ? pathOrUrl : `${this.opts.baseUrl}${PREFIX}${pathOrUrl}`;
    const text = body === undefined ? undefined : JSON.stringify(body);
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      try {
        res = await this.doFetch(url, {
          method,
          headers: {
            authorization: `Bearer ${this.opts.apiKey}`,
            'x-shop-id': this.opts.shopId,
            ...(text !== undefined ? { 'content-type': 'application/json' } : {}),
          },
          body: text,
        });
      } catch (e) {
        if (attempt >= this.opts.retries) throw e;
        await sleep(this.backoff(attempt));
        continue;
      }
      if (res.ok) {
        const raw = res.status === 204 ? '' : await res.text();
        return { status: res.status, body: (raw ? JSON.parse(raw) : undefined) as T };
      }
      const error = await errorOf(res);
      const retryable = res.status === 429 || res.status >= 500;
      if (!retryable || attempt >= this.opts.retries) throw error;
      const after = retryAfterMs(res.headers.get('retry-after'));
      if (after !== null && after > this.opts.maxRetryAfterMs) throw error;
      await sleep(after ?? this.backoff(attempt));
    }
  }

  private backoff(attempt: number): number {
    return Math.random() * Math.min(this.opts.maxBackoffMs, this.opts.minBackoffMs * 2 ** attempt);
  }
}

async function errorOf(res: Response): Promise<ShopstreamError> {
  const raw = await res.text().catch(() => '');
  try {
    const { error } = JSON.parse(raw) as ErrorBody;
    return new ShopstreamError(res.status, error.code, error.message, error.request_id, error.fields as Record<string, unknown>);
  } catch {
    return new ShopstreamError(res.status, 'http_error', raw.slice(0, 200) || res.statusText, res.headers.get('x-request-id'));
  }
}

/** Retry-After in seconds (the API's form) or as an HTTP date. */
function retryAfterMs(value: string | null): number | null {
  if (!value) return null;
  if (/^\d+$/.test(value.trim())) return Number(value) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
}

function query(params: Record<string, unknown>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null) continue;
    q.set(k, Array.isArray(v) ? v.join(',') : String(v));
  }
  return q.toString();
}

/** Chunks of at most 100 events and 1 MiB of JSON, with the position of their first event. */
export function splitEvents(events: EventInput[]): { start: number; events: EventInput[] }[] {
  const chunks: { start: number; events: EventInput[] }[] = [];
  let current: EventInput[] = [];
  let bytes = 0;
  let start = 0;
  const utf8 = new TextEncoder();
  const envelope = utf8.encode('{"events":[]}').length;
  events.forEach((e, i) => {
    const size = utf8.encode(JSON.stringify(e)).length + 1;
    if (current.length > 0 && (current.length >= MAX_BULK_EVENTS || envelope + bytes + size > MAX_BULK_BYTES)) {
      chunks.push({ start, events: current });
      current = [];
      bytes = 0;
      start = i;
    }
    current.push(e);
    bytes += size;
  });
  if (current.length > 0) chunks.push({ start, events: current });
  return chunks;
}
