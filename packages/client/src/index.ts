/**
 * @shopstream/client: a typed client for Shopstream's HTTP API, with no runtime dependency beyond `fetch`.
 * Its types are the zod contracts the server validates with, expanded into plain types (src/contractTypes.ts,
 * generated): the package imports nothing, at run time or in its declarations.
 */
import type {
  Activity,
  BulkResultItem,
  Conversation,
  ErrorBody,
  EventAccepted,
  EventInput,
  ExportFilters,
  Flow,
  FlowCreateInput,
  FlowTriggerEntry,
  FlowUpdateInput,
  DeletionJob,
  DeletionJobAccepted,
} from './contractTypes.js';

export type { Activity, BulkResultItem, Conversation, EventAccepted, EventInput, Flow, FlowCreateInput, FlowTriggerEntry, FlowUpdateInput };
/** Filters of the conversation export, as query parameters (`created_at__range`, `resolution__in`, ...). */
export type ExportParams = ExportFilters & {
  /** Conversations per page, 1 to 100; default 100. */
  limit?: number;
};

/** Per call: an AbortSignal of yours, and a timeout for each attempt other than the client's. */
export interface RequestOptions {
  /** Aborts the call (and its retries) at once: the call rejects with the signal's reason, without a retry. */
  signal?: AbortSignal;
  /** This call's bound on each attempt (the request and reading its answer). Default: the client's `timeoutMs`. */
  timeoutMs?: number;
}

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
  /** Bound on each attempt of a request, answer read included; an attempt that takes longer is retried. Default 10 s. */
  timeoutMs?: number;
  /** track(): events taken but not yet delivered (queued or in a flush) at most; track() drops beyond it. Default 10,000. */
  maxQueueSize?: number;
  /** track(): told about each event dropped because `maxQueueSize` events were waiting. Default: a line on stderr (the first, then every 1,000th). */
  onDrop?: (event: EventInput) => void;
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

/** An attempt got no complete answer within `timeoutMs` (the last one, after retries), or flush()/close() gave up. */
export class ShopstreamTimeoutError extends Error {
  constructor(
    readonly timeoutMs: number,
    what: string,
  ) {
    super(`${what} got no answer within ${timeoutMs} ms`);
    this.name = 'ShopstreamTimeoutError';
  }
}

const PREFIX = '/v2026-04';
const MAX_BULK_EVENTS = 100;
/** The bulk endpoint takes 10 MiB; a request of the client stays at 1 MiB so one slow request never holds much. */
const MAX_BULK_BYTES = 1024 * 1024;

/** Waits `ms`, or rejects with the signal's reason as soon as it aborts. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason as Error);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A signal that aborts when any of `signals` does (AbortSignal.any, written out: Node 20.0 to 20.2 lack it). */
function anySignal(signals: (AbortSignal | undefined)[]): { signal: AbortSignal; dispose: () => void } {
  const controller = new AbortController();
  const present = signals.filter((s): s is AbortSignal => s !== undefined);
  const onAbort = (e: Event) => controller.abort((e.target as AbortSignal).reason);
  for (const s of present) {
    if (s.aborted) {
      controller.abort(s.reason);
      break;
    }
    s.addEventListener('abort', onAbort, { once: true });
  }
  return { signal: controller.signal, dispose: () => present.forEach((s) => s.removeEventListener('abort', onAbort)) };
}

/**
 * The idempotency key of an event without one (no `remote_id`, no `metric.deduping_key`): a random
 * `deduping_key`, made once per call and sent again on each retry, so a request whose answer was lost is
 * answered as a replay of the same activity instead of recording a second one.
 */
function withKey(event: EventInput): EventInput {
  const keyed = event.remote_id != null || event.metric.deduping_key !== undefined;
  return keyed ? event : { ...event, metric: { ...event.metric, deduping_key: globalThis.crypto.randomUUID() } };
}

export class ShopstreamClient {
  private readonly opts: Required<Omit<ShopstreamClientOptions, 'onError' | 'onDrop' | 'fetch'>> & Pick<ShopstreamClientOptions, 'onError' | 'onDrop'>;
  private readonly doFetch: typeof fetch;
  private queue: EventInput[] = [];
  /** Events track() took that are not yet delivered or reported: the queue and the batches of running flushes. */
  private waiting = 0;
  private dropped = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private flushing: Promise<void> = Promise.resolve();
  /** Aborted when a flush() or close() runs out of time: every batch sent or waiting until then gives up. */
  private giveUp = new AbortController();
  private closed = false;

  constructor(options: ShopstreamClientOptions) {
    this.opts = {
      retries: 5,
      minBackoffMs: 200,
      maxBackoffMs: 10_000,
      maxRetryAfterMs: 120_000,
      flushAt: 100,
      flushIntervalMs: 1_000,
      timeoutMs: 10_000,
      maxQueueSize: 10_000,
      ...options,
      baseUrl: options.baseUrl.replace(/\/+$/, ''),
    };
    this.doFetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /**
   * Records one event; resolves once the service's log holds it. A replay (same key) answers the same activity id.
   * An event without `remote_id` or `metric.deduping_key` is sent with a random `deduping_key` (the same on each
   * retry), so a retry after a lost answer never records it twice.
   */
  async recordEvent(event: EventInput, options: RequestOptions = {}): Promise<EventAccepted> {
    return (await this.request<EventAccepted>('POST', '/events/', withKey(event), options)).body;
  }

  /**
   * Records any number of events: split into requests of at most 100 events and 1 MiB, sent one after the
   * other; the results come back one per event, in input order, with `index` its position in `events`. Events
   * without a key get one as in recordEvent().
   */
  async recordEvents(events: EventInput[], options: RequestOptions = {}): Promise<BulkResultItem[]> {
    const results: BulkResultItem[] = [];
    for (const chunk of splitEvents(events.map(withKey))) {
      const { body } = await this.request<{ results: BulkResultItem[] }>('POST', '/events/bulk/', { events: chunk.events }, options);
      for (const r of body.results) results.push({ ...r, index: chunk.start + r.index });
    }
    return results;
  }

  /**
   * Queues an event and returns at once; the queue is sent in bulk when it holds `flushAt` events, `flushIntervalMs`
   * after the first one, and on flush()/close(). Events without a `remote_id` or `deduping_key` get a random
   * `metric.deduping_key`, so a retried request replays them instead of recording them twice. When `maxQueueSize`
   * events are waiting (queued or in a flush not yet answered), the event is dropped and given to `onDrop`.
   */
  track(event: EventInput): void {
    if (this.closed) throw new Error('ShopstreamClient: track() after close()');
    if (this.waiting >= this.opts.maxQueueSize) {
      this.drop(event);
      return;
    }
    this.waiting++;
    this.queue.push(withKey(event));
    if (this.queue.length >= this.opts.flushAt) void this.sendQueue();
    else this.timer ??= setTimeout(() => void this.sendQueue(), this.opts.flushIntervalMs);
  }

  /**
   * Sends what track() queued; resolves when it was delivered or reported to onError, at most `timeoutMs`
   * (default 30 s) later: then every batch still unanswered is abandoned and reported to onError with a
   * ShopstreamTimeoutError.
   */
  async flush(options: { timeoutMs?: number } = {}): Promise<void> {
    await this.bounded(this.sendQueue(), options.timeoutMs ?? 30_000, 'flush()');
  }

  /** Stops taking events and flushes; resolves within `timeoutMs` (default 30 s), as flush() does. */
  async close(options: { timeoutMs?: number } = {}): Promise<void> {
    this.closed = true;
    await this.bounded(this.sendQueue(), options.timeoutMs ?? 30_000, 'close()');
  }

  /** Hands the queue to a flush of its own, after those before it; resolves when that one (and so they) settled. */
  private sendQueue(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const batch = this.queue;
    this.queue = [];
    const signal = this.giveUp.signal;
    // Flushes run one after the other: events keep their order per key.
    this.flushing = this.flushing.then(async () => {
      if (batch.length === 0) return;
      try {
        const results = await this.recordEvents(batch, { signal });
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
      } finally {
        this.waiting -= batch.length;
      }
    });
    return this.flushing;
  }

  /** Waits for `work` at most `timeoutMs`; then aborts what it waits on and waits for it to report (at once). */
  private async bounded(work: Promise<void>, timeoutMs: number, what: string): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const expired = new Promise<'expired'>((r) => (timer = setTimeout(() => r('expired'), timeoutMs)));
    try {
      if ((await Promise.race([work, expired])) !== 'expired') return;
    } finally {
      clearTimeout(timer);
    }
    const giveUp = this.giveUp;
    this.giveUp = new AbortController();
    giveUp.abort(new ShopstreamTimeoutError(timeoutMs, what));
    await work;
  }

  private drop(event: EventInput): void {
    this.dropped++;
    if (this.opts.onDrop) this.opts.onDrop(event);
    else if (this.dropped % 1000 === 1)
      console.error(`@shopstream/client: track() dropped an event: ${this.opts.maxQueueSize} events waiting (${this.dropped} dropped so far)`);
  }

  getActivity(id: string, options: RequestOptions = {}): Promise<Activity> {
    return this.request<Activity>('GET', `/activities/${encodeURIComponent(id)}/`, undefined, options).then((r) => r.body);
  }

  /** The workspace's activities (without a contact), newest first, every page. */
  listActivities(params: { limit?: number } = {}, options: RequestOptions = {}): AsyncIterable<Activity> {
    return this.pages<Activity>(`/activities/?${query({ scope: 'workspace', ...params })}`, options);
  }

  /** A contact's timeline, newest event_time first, every page. */
  contactTimeline(contactId: string, params: { limit?: number } = {}, options: RequestOptions = {}): AsyncIterable<Activity> {
    return this.pages<Activity>(`/contacts/${encodeURIComponent(contactId)}/timeline/?${query(params)}`, options);
  }

  createFlow(flow: FlowCreateInput, options: RequestOptions = {}): Promise<Flow> {
    return this.request<Flow>('POST', '/flows/', flow, options).then((r) => r.body);
  }

  listFlows(params: { status?: 'active' | 'paused'; limit?: number } = {}, options: RequestOptions = {}): AsyncIterable<Flow> {
    return this.pages<Flow>(`/flows/?${query(params)}`, options);
  }

  getFlow(id: string, options: RequestOptions = {}): Promise<Flow> {
    return this.request<Flow>('GET', `/flows/${encodeURIComponent(id)}/`, undefined, options).then((r) => r.body);
  }

  updateFlow(id: string, change: FlowUpdateInput, options: RequestOptions = {}): Promise<Flow> {
    return this.request<Flow>('PATCH', `/flows/${encodeURIComponent(id)}/`, change, options).then((r) => r.body);
  }

  async deleteFlow(id: string, options: RequestOptions = {}): Promise<void> {
    await this.request('DELETE', `/flows/${encodeURIComponent(id)}/`, undefined, options);
  }

  flowTriggers(flowId: string, params: { limit?: number } = {}, options: RequestOptions = {}): AsyncIterable<FlowTriggerEntry> {
    return this.pages<FlowTriggerEntry>(`/flows/${encodeURIComponent(flowId)}/triggers/?${query(params)}`, options);
  }

  /**
   * Every conversation the filters select, oldest first, following `next` to the end. A 429 (60 requests a
   * minute per key and shop) is waited out, as its Retry-After says.
   */
  exportConversations(params: ExportParams = {}, options: RequestOptions = {}): AsyncIterable<Conversation> {
    return this.pages<Conversation>(`/conversations/export/?${query(params as Record<string, unknown>)}`, options);
  }

  /**
   * Erases a person (docs/privacy.md): queues a deletion job for exactly one identifier; the job runs in the
   * background. Follow it with waitForDeletion.
   */
  requestDeletion(
    identifier: { email: string } | { phone: string } | { remote_id: string } | { contact_id: string },
    options: RequestOptions = {},
  ): Promise<DeletionJobAccepted> {
    return this.request<DeletionJobAccepted>('POST', '/data-privacy/deletion-jobs/', identifier, options).then((r) => r.body);
  }

  /** Waits until a deletion job is completed or failed (polling every intervalMs, default 1 s) and gives it; throws after timeoutMs (default 10 min). */
  async waitForDeletion(id: string, opts: { intervalMs?: number; timeoutMs?: number } = {}, options: RequestOptions = {}): Promise<DeletionJob> {
    const deadline = Date.now() + (opts.timeoutMs ?? 600_000);
    for (;;) {
      const job = (await this.request<DeletionJob>('GET', `/data-privacy/deletion-jobs/${encodeURIComponent(id)}/`, undefined, options)).body;
      if (job.status === 'completed' || job.status === 'failed') return job;
      if (Date.now() >= deadline) throw new Error(`deletion job ${id} is still ${job.status} after ${opts.timeoutMs ?? 600_000} ms`);
      await new Promise((r) => setTimeout(r, opts.intervalMs ?? 1_000));
    }
  }

  private async *pagesOf<T>(first: string, options: RequestOptions): AsyncGenerator<T> {
    let url: string | null = first;
    while (url) {
      const page: { results: T[]; next: string | null } = (await this.request<{ results: T[]; next: string | null }>('GET', url, undefined, options)).body;
      yield* page.results;
      url = page.next;
    }
  }

  private pages<T>(first: string, options: RequestOptions): AsyncIterable<T> {
    return { [Symbol.asyncIterator]: () => this.pagesOf<T>(first, options) };
  }

  private report(error: Error, events: EventInput[]): void {
    if (this.opts.onError) this.opts.onError(error, events);
    else console.error(`@shopstream/client: ${events.length} events not delivered: ${error.message}`);
  }

  /**
   * One API call with retries: a 429 or 503 after its Retry-After, other 5xx, network failures and attempts
   * without an answer within `timeoutMs` after a jittered backoff; never a 4xx other than 429 (the request itself
   * is wrong: sending it again cannot help). The caller's signal ends it at once, between attempts too.
   */
  private async request<T>(method: string, pathOrUrl: string, body: unknown, options: RequestOptions): Promise<{ status: number; body: T }> {
    const url = /^https?:\/\//.test(pathOrUrl) ? pathOrUrl : `${this.opts.baseUrl}${PREFIX}${pathOrUrl}`;
    const text = body === undefined ? undefined : JSON.stringify(body);
    const timeoutMs = options.timeoutMs ?? this.opts.timeoutMs;
    for (let attempt = 0; ; attempt++) {
      const timeout = new AbortController();
      const timer = setTimeout(() => timeout.abort(new ShopstreamTimeoutError(timeoutMs, `${method} ${new URL(url).pathname}`)), timeoutMs);
      const { signal, dispose } = anySignal([options.signal, timeout.signal]);
      let outcome: { res: Response; raw: string } | { error: unknown };
      try {
        const res = await this.doFetch(url, {
          method,
          headers: {
            authorization: `Bearer ${this.opts.apiKey}`,
            'x-shop-id': this.opts.shopId,
            ...(text !== undefined ? { 'content-type': 'application/json' } : {}),
          },
          body: text,
          signal,
        });
        // The answer is read under the same timeout: a server that sends its headers and then stalls is a timeout too.
        outcome = { res, raw: res.status === 204 ? '' : await res.text() };
      } catch (e) {
        // fetch rejects with the signal's reason: the caller's abort ends the call, a timeout is retried.
        outcome = { error: timeout.signal.aborted && !options.signal?.aborted ? timeout.signal.reason : e };
      } finally {
        clearTimeout(timer);
        dispose();
      }
      if ('error' in outcome) {
        if (options.signal?.aborted) throw options.signal.reason;
        if (attempt >= this.opts.retries) throw outcome.error;
        await sleep(this.backoff(attempt), options.signal);
        continue;
      }
      const { res, raw } = outcome;
      if (res.ok) return { status: res.status, body: (raw ? JSON.parse(raw) : undefined) as T };
      const error = errorOf(res, raw);
      const retryable = res.status === 429 || res.status >= 500;
      if (!retryable || attempt >= this.opts.retries) throw error;
      const after = retryAfterMs(res.headers.get('retry-after'));
      if (after !== null && after > this.opts.maxRetryAfterMs) throw error;
      await sleep(after ?? this.backoff(attempt), options.signal);
    }
  }

  private backoff(attempt: number): number {
    return Math.random() * Math.min(this.opts.maxBackoffMs, this.opts.minBackoffMs * 2 ** attempt);
  }
}

function errorOf(res: Response, raw: string): ShopstreamError {
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
