/**
 * The load generator, in a process of its own so it never shares an event loop with the server it
 * measures. The parent sends one `{type: 'run', spec}`; this answers `{type: 'result', ...}` (and, for an
 * open loop that collects answers, `{type: 'answers', items}` while it runs), then exits.
 *
 * - closed: `concurrency` clients each send the next request as soon as the previous one answered.
 * - open: requests are sent on a fixed schedule whatever the server does, and latency counts from the
 *   scheduled time, so queueing shows (no coordinated omission).
 * - producer: the baseline: a bare producer of the named client (kafkajs by default; @platformatic/kafka
 *   when installed), idempotent, acks -1, one send in flight per producer, sending the same records in the
 *   same batch sizes with the same concurrency.
 */
import { randomUUID } from 'node:crypto';
import { Kafka, logLevel, CompressionTypes } from 'kafkajs';
import { Pool } from 'undici';
import { headers as H, schemas } from '@shopstream/contracts';
import { eventMaker, eventRecordOf } from './events.js';
import { Samples, epochMs, sleep, type LatencySummary } from './stats.js';
import { failChild } from './children.js';

export type KafkaClientName = 'kafkajs' | 'platformatic';

export interface Shop {
  shopId: string;
  key: string;
}

interface Common {
  durationMs: number;
  warmupMs: number;
  seed: string;
}

export type LoadSpec =
  | (Common & { mode: 'closed'; baseUrl: string; shops: Shop[]; concurrency: number; bulkSize: number })
  | (Common & { mode: 'open'; baseUrl: string; shops: Shop[]; rate: number; maxConnections: number; collectAnswers?: boolean })
  | (Common & { mode: 'producer'; brokers: string[]; topic: string; shops: Shop[]; concurrency: number; bulkSize: number; client?: KafkaClientName })
  | { mode: 'get'; baseUrl: string; shop: Shop; paths: string[]; walk: boolean; durationMs: number; warmupMs: number; maxMs?: number };

export interface LoadResult {
  /** Requests (or sends) completed inside the measurement window. */
  requests: number;
  /** Events they carried. */
  events: number;
  elapsedMs: number;
  requestsPerSecond: number;
  eventsPerSecond: number;
  latencyMs: LatencySummary;
  status: Record<string, number>;
  /** Bulk items answered with an error. */
  itemErrors: number;
  /** Open loop: requests the schedule asked for in the window, and how many had not been answered at its end. */
  scheduled?: number;
  unanswered?: number;
  /** Open loop: answers received inside the window, per second (what the server kept up with). */
  servedPerSecond?: number;
  firstError?: string;
  /** get: pages fetched and conversations they held; the time of the whole run. */
  pages?: number;
  conversations?: number;
  totalMs?: number;
  /** get with maxMs: whether every path (and walk) ran to its end before the time ran out. */
  complete?: boolean;
}

const bulkPath = '/v2026-04/events/bulk/';
const singlePath = '/v2026-04/events/';

function headersOf(shop: Shop): Record<string, string> {
  return { authorization: `Bearer ${shop.key}`, 'x-shop-id': shop.shopId, 'content-type': 'application/json' };
}

class Window {
  readonly start: number;
  readonly end: number;
  readonly samples = new Samples();
  requests = 0;
  events = 0;
  itemErrors = 0;
  status: Record<string, number> = {};
  firstError?: string;
  constructor(spec: Common) {
    this.start = performance.now() + spec.warmupMs;
    this.end = this.start + spec.durationMs;
  }
  inside(t0: number, t1: number) {
    return t0 >= this.start && t1 <= this.end;
  }
  count(status: string) {
    this.status[status] = (this.status[status] ?? 0) + 1;
  }
  result(extra: Partial<LoadResult> = {}): LoadResult {
    const seconds = (this.end - this.start) / 1000;
    return {
      requests: this.requests,
      events: this.events,
      elapsedMs: this.end - this.start,
      requestsPerSecond: Math.round(this.requests / seconds),
      eventsPerSecond: Math.round(this.events / seconds),
      latencyMs: this.samples.summary(),
      status: this.status,
      itemErrors: this.itemErrors,
      firstError: this.firstError,
      ...extra,
    };
  }
}

async function closed(spec: Extract<LoadSpec, { mode: 'closed' }>): Promise<LoadResult> {
  const pool = new Pool(spec.baseUrl, { connections: spec.concurrency, pipelining: 1 });
  const w = new Window(spec);
  const bulk = spec.bulkSize > 1;
  const worker = async (i: number) => {
    const maker = eventMaker({ seed: `${spec.seed}-${i}` });
    let n = 0;
    while (performance.now() < w.end) {
      const shop = spec.shops[(i + n++) % spec.shops.length];
      const body = bulk ? JSON.stringify({ events: Array.from({ length: spec.bulkSize }, () => maker.event()) }) : JSON.stringify(maker.event());
      const t0 = performance.now();
      let status = 'error';
      let items = 0;
      let itemErrors = 0;
      try {
        const res = await pool.request({ method: 'POST', path: bulk ? bulkPath : singlePath, headers: headersOf(shop), body });
        status = String(res.statusCode);
        const text = await res.body.text();
        if (res.statusCode === 200 && bulk) {
          const results = JSON.parse(text).results as { status: string }[];
          items = results.length;
          itemErrors = results.filter((r) => r.status !== 'success').length;
        } else if (res.statusCode === 202) items = 1;
        else w.firstError ??= `${res.statusCode} ${text.slice(0, 300)}`;
      } catch (e) {
        w.firstError ??= String(e);
      }
      const t1 = performance.now();
      if (!w.inside(t0, t1)) continue;
      w.count(status);
      w.requests++;
      w.events += items - itemErrors;
      w.itemErrors += itemErrors;
      w.samples.add(t1 - t0);
    }
  };
  await Promise.all(Array.from({ length: spec.concurrency }, (_, i) => worker(i)));
  await pool.close();
  return w.result();
}

async function open(spec: Extract<LoadSpec, { mode: 'open' }>): Promise<LoadResult> {
  const pool = new Pool(spec.baseUrl, { connections: spec.maxConnections, pipelining: 1 });
  const w = new Window(spec);
  const maker = eventMaker({ seed: spec.seed });
  const interval = 1000 / spec.rate;
  const t0 = performance.now();
  let sent = 0;
  let scheduledInWindow = 0;
  let servedInWindow = 0;
  let pending = 0;
  let answers: { id: string; shop: string; t: number }[] = [];
  const flushAnswers = () => {
    if (answers.length === 0) return;
    process.send!({ type: 'answers', items: answers });
    answers = [];
  };
  const flusher = spec.collectAnswers ? setInterval(flushAnswers, 50) : null;
  const fire = (scheduled: number) => {
    const shop = spec.shops[sent % spec.shops.length];
    const body = JSON.stringify(maker.event());
    const measured = scheduled >= w.start && scheduled < w.end;
    if (measured) scheduledInWindow++;
    pending++;
    pool
      .request({ method: 'POST', path: singlePath, headers: headersOf(shop), body })
      .then(async (res) => {
        const text = await res.body.text();
        const t1 = performance.now();
        if (t1 >= w.start && t1 <= w.end) servedInWindow++;
        if (res.statusCode === 202) {
          if (spec.collectAnswers && measured) answers.push({ id: JSON.parse(text).activity_id, shop: shop.shopId, t: epochMs() });
        } else w.firstError ??= `${res.statusCode} ${text.slice(0, 300)}`;
        if (measured) {
          w.count(String(res.statusCode));
          w.requests++;
          if (res.statusCode === 202) w.events++;
          w.samples.add(t1 - scheduled);
        }
      })
      .catch((e) => {
        w.firstError ??= String(e);
        if (measured) w.count('error');
      })
      .finally(() => pending--);
  };
  while (performance.now() < w.end) {
    const due = Math.floor((performance.now() - t0) / interval) + 1;
    while (sent < due) fire(t0 + sent++ * interval);
    await sleep(1);
  }
  // Answers for requests scheduled in the window still count, with their full wait: give them a moment.
  const deadline = performance.now() + 10_000;
  while (pending > 0 && performance.now() < deadline) await sleep(10);
  if (flusher) clearInterval(flusher);
  flushAnswers();
  const unanswered = pending;
  await pool.destroy();
  return w.result({ scheduled: scheduledInWindow, unanswered, servedPerSecond: Math.round(servedInWindow / (spec.durationMs / 1000)) });
}

/** One bare producer's send of a batch: resolves once the broker acknowledged it. */
type Send = (messages: { key: string; value: string; headers: Record<string, string> }[]) => Promise<void>;

/**
 * kafkajs as the bus configures it: one idempotent producer (maxInFlightRequests 1) shared by the senders.
 * @platformatic/kafka: one idempotent producer per sender (it allows one send in flight per producer).
 */
async function bareProducers(spec: Extract<LoadSpec, { mode: 'producer' }>): Promise<{ senders: Send[]; close(): Promise<void> }> {
  if ((spec.client ?? 'kafkajs') === 'kafkajs') {
    const kafka = new Kafka({ clientId: 'bench-bare-producer', brokers: spec.brokers, logLevel: logLevel.WARN });
    const p = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
    await p.connect();
    const send: Send = async (messages) => {
      await p.send({ topic: spec.topic, acks: -1, compression: CompressionTypes.None, messages });
    };
    return { senders: Array.from({ length: spec.concurrency }, () => send), close: () => p.disconnect() };
  }
  // Loaded only when this baseline runs.
  const pk = await import('@platformatic/kafka');
  const producers = Array.from(
    { length: spec.concurrency },
    (_, i) =>
      new pk.Producer({
        clientId: `bench-bare-producer-${i}`,
        bootstrapBrokers: spec.brokers,
        idempotent: true,
        acks: pk.ProduceAcks.ALL,
        serializers: pk.stringSerializers,
      }),
  );
  const senders: Send[] = producers.map((p) => async (messages) => {
    await p.send({ messages: messages.map((m) => ({ topic: spec.topic, key: m.key, value: m.value, headers: new Map(Object.entries(m.headers)) })) });
  });
  return { senders, close: async () => void (await Promise.all(producers.map((p) => p.close()))) };
}

async function producer(spec: Extract<LoadSpec, { mode: 'producer' }>): Promise<LoadResult> {
  const { senders, close } = await bareProducers(spec);
  const w = new Window(spec);
  const worker = async (i: number) => {
    const maker = eventMaker({ seed: `${spec.seed}-${i}` });
    let n = 0;
    while (performance.now() < w.end) {
      const shop = spec.shops[(i + n++) % spec.shops.length];
      const requestId = randomUUID();
      const messages = Array.from({ length: spec.bulkSize }, () => ({
        key: shop.shopId,
        value: JSON.stringify(eventRecordOf(shop.shopId, maker.event(), requestId)),
        headers: { [H.contentType]: 'application/json', [H.schema]: schemas.eventRecorded, [H.shopId]: shop.shopId },
      }));
      const t0 = performance.now();
      let status = 'ok';
      try {
        await senders[i](messages);
      } catch (e) {
        status = 'error';
        w.firstError ??= String(e);
      }
      const t1 = performance.now();
      if (!w.inside(t0, t1)) continue;
      w.count(status);
      w.requests++;
      if (status === 'ok') w.events += messages.length;
      w.samples.add(t1 - t0);
    }
  };
  await Promise.all(Array.from({ length: spec.concurrency }, (_, i) => worker(i)));
  await close();
  return w.result();
}

/**
 * Export requests one after the other: each path once, or (walk) each path's `next` links until null.
 * Every page is checked to be a 200 with results.
 */
async function get(spec: Extract<LoadSpec, { mode: 'get' }>): Promise<LoadResult> {
  const pool = new Pool(spec.baseUrl, { connections: 1, pipelining: 1 });
  const samples = new Samples();
  const status: Record<string, number> = {};
  let pages = 0;
  let conversations = 0;
  let firstError: string | undefined;
  const t0 = performance.now();
  let complete = true;
  for (const start of spec.paths) {
    let path: string | null = start;
    while (path) {
      if (spec.maxMs !== undefined && performance.now() - t0 > spec.maxMs) {
        complete = false;
        break;
      }
      const s = performance.now();
      const res = await pool.request({ method: 'GET', path, headers: { authorization: `Bearer ${spec.shop.key}`, 'x-shop-id': spec.shop.shopId } });
      const text = await res.body.text();
      samples.add(performance.now() - s);
      status[res.statusCode] = (status[res.statusCode] ?? 0) + 1;
      pages++;
      if (res.statusCode !== 200) {
        firstError ??= `${res.statusCode} ${text.slice(0, 300)}`;
        break;
      }
      const page = JSON.parse(text) as { results: unknown[]; next: string | null };
      conversations += page.results.length;
      path = spec.walk && page.next ? new URL(page.next).pathname + new URL(page.next).search : null;
    }
  }
  const totalMs = performance.now() - t0;
  await pool.close();
  const latencyMs = samples.summary();
  return {
    requests: pages,
    events: 0,
    elapsedMs: totalMs,
    requestsPerSecond: Math.round(pages / (totalMs / 1000)),
    eventsPerSecond: 0,
    latencyMs,
    status,
    itemErrors: 0,
    firstError,
    pages,
    conversations,
    totalMs,
    complete,
  };
}

function run(spec: LoadSpec): Promise<LoadResult> {
  switch (spec.mode) {
    case 'closed':
      return closed(spec);
    case 'open':
      return open(spec);
    case 'producer':
      return producer(spec);
    case 'get':
      return get(spec);
    default: {
      const never: never = spec;
      throw new Error(`unknown load ${JSON.stringify(never)}`);
    }
  }
}

process.once('message', (m: any) => {
  if (m?.type !== 'run') return;
  const spec = m.spec as LoadSpec;
  run(spec).then(
    (result) => process.send!({ type: 'result', result }, () => process.exit(0)),
    (e) => failChild(e),
  );
});
process.send!({ type: 'ready' });
