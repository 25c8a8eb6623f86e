import { topicLimits } from '@shopstream/contracts';
import { counter, histogram, type Logger } from '@shopstream/telemetry';
import { BusUnavailableError, PublishAbandonedError, RecordsTooLargeError, type OutgoingRecord, type PublishOptions } from '../port.js';
import { createMicroBatcher } from '../microBatcher.js';
import { splitForSend } from '../sendSize.js';
import { createBrokerGate, PublishRefusedError, refusals } from './brokerGate.js';
import { securityFailure } from './security.js';
import { withTimeout } from './timeouts.js';

/** The publish path of both Kafka adapters, over each one's producer; and what their sends share. */

const resentRecords = counter(
  'shopstream_kafka_records_resent_total',
  'Records sent again because Kafka answered a send without their partition (a leader moved during it; kafkajs#1303).',
);
const sendSeconds = histogram('shopstream_kafka_send_seconds', 'Time of one Kafka produce request (a micro-batch), by outcome.', ['outcome']);

/**
 * An error's message with the distinct messages of the errors it gathered (AggregateError.errors, as
 * @platformatic/kafka reports a send's retries) and of its causes: "Producing messages failed." alone does not
 * tell ops which partition refused what.
 */
function errorSummary(e: unknown): string {
  const security = securityFailure(e);
  if (security) return security;
  const leaves = new Set<string>();
  const seen = new Set<unknown>();
  const walk = (err: unknown, depth: number) => {
    if (!err || typeof err !== 'object' || depth > 6 || seen.has(err)) return;
    seen.add(err);
    const x = err as { message?: string; errors?: unknown[]; cause?: unknown; apiId?: string };
    const inner = [...(x.errors ?? []), ...(x.cause ? [x.cause] : [])];
    if (inner.length === 0 || depth > 0) leaves.add(x.apiId ? `${x.message} (${x.apiId})` : String(x.message));
    for (const i of inner) walk(i, depth + 1);
  };
  walk(e, 0);
  const first = (e as Error)?.message ?? String(e);
  leaves.delete(first);
  return leaves.size === 0 ? first : `${first} (${[...leaves].slice(0, 5).join('; ')})`;
}

/**
 * The partition of each key, per topic and partition count, remembered: records carry few distinct keys (the
 * shop id), and a keyed record's partition depends only on its key and the partition count. compute() hashes.
 */
export function keyPartitionMemo(): (topic: string, key: string, count: number, compute: () => number) => number {
  const known = new Map<string, number>();
  return (topic, key, count, compute) => {
    const k = `${count}\u0000${topic}\u0000${key}`;
    let partition = known.get(k);
    if (partition === undefined) {
      partition = compute();
      if (known.size >= 100_000) known.clear();
      known.set(k, partition);
    }
    return partition;
  };
}

/**
 * One send, and again for whatever records its answer lacks (Kafka answered without their partition: a leader
 * moved during it; kafkajs#1303, see kafkajs/producer.ts's sendAll), at most 5 sends in all. send(pending) makes one send
 * and returns what to send again (`again`, to the same partitions) and how many records that is.
 */
export async function sendUntilAnswered<P>(log: Logger, first: P, send: (pending: P) => Promise<{ again: P; records: number }>): Promise<void> {
  let pending = first;
  for (let attempt = 1; ; attempt++) {
    const { again, records } = await send(pending);
    if (records === 0) return;
    resentRecords.inc(records);
    log.warn({ records, attempt }, 'Kafka answered a send without some of its partitions (a leader moved): sending those records again');
    if (attempt >= 5) throw new BusUnavailableError(`Kafka answered ${attempt} sends without ${records} of their records' partitions`);
    pending = again;
  }
}

/**
 * How long a send may be in flight before the publisher takes the broker for stalled (KafkaBusBaseOptions.stallMs).
 * A healthy broker acknowledges a send in milliseconds; on the shared 2-core test machine under load, a whole
 * ingest request, its send included, took 78 to 258 ms at p99 (bench/README.md). A SIGSTOPped broker or a dead
 * link answers never, and its sends hang until publishTimeoutMs. A second is four times that loaded p99, so a
 * slow but healthy broker is not taken for stalled, and leaves room, within the 2 s ingest promises, to answer
 * the requests whose records are in that send (PUBLISH_WAIT_BEYOND_STALL_MS).
 */
const DEFAULT_STALL_MS = 1_000;
/**
 * How much longer than stallMs a publish waits for its send before it answers BusUnavailableError: records in a
 * send that is slow but alive still get their ack, and the caller hears within stallMs + 800 ms (1.8 s by
 * default: ingest's 2 s, less the HTTP round trip), never waiting out publishTimeoutMs.
 */
const PUBLISH_WAIT_BEYOND_STALL_MS = 800;
/**
 * What a send's size adds to its stall bound: a full send (topicLimits.sendBudgetBytes, 4 MiB) took up to 476 ms
 * (kafkajs) and 206 ms (@platformatic/kafka) on the shared 2-core machine at load 4.4, so a large send of a healthy
 * broker gets twice that per MiB more before it counts as stalled: 2 s for 4 MiB, 1 s for ingest's few KiB.
 */
const STALL_MS_PER_MIB = 250;

/** The records of one micro-batch, by topic, each topic's in publish order. */
export type RecordsByTopic = Map<string, OutgoingRecord[]>;

/** What an adapter gives createKafkaPublisher: its producer, behind these. */
export interface KafkaPublisherOptions {
  lingerMs?: number;
  publishTimeoutMs: number;
  /** A send in flight longer than this marks the broker stalled (default DEFAULT_STALL_MS). */
  stallMs?: number;
  /** Before each send, within its own publishTimeoutMs: connects the current producer, where the client wants that. */
  connect?: () => Promise<void>;
  /**
   * One micro-batch, by the current producer, with acks=all: resolves once the broker acknowledged every record
   * of it (sendUntilAnswered), rejects otherwise.
   */
  sendAll(byTopic: RecordsByTopic): Promise<void>;
  /** Whether a failed send says the broker is away (unreachable, no answer in time), not that it refused these records. */
  brokerAway(e: unknown): boolean;
  /** Whether a failed send says a partition's records were larger than its topic takes (RecordsTooLargeError). */
  tooLarge(e: unknown): boolean;
  /** After a failed or timed-out send: a new producer for the next send, the failed one never reused (see kafkajs/producer.ts). */
  replaceProducer(): void;
}

interface KafkaPublisher {
  /** Bus.publish: resolves once the broker acknowledged every record; BusUnavailableError otherwise. */
  publish(topic: string, records: OutgoingRecord[], opts?: PublishOptions): Promise<void>;
  /** Sends what is pending and waits for the send in flight. */
  close(): Promise<void>;
}

/**
 * One publish's share of a micro-batch: queued until a flush takes it; given up (never sent) when its wait ran out
 * first; abandoned (never sent) when its caller's `abandoned` said so as the flush took it.
 */
interface PublishItem {
  topic: string;
  records: OutgoingRecord[];
  bytes: number;
  probe: boolean;
  state: 'queued' | 'sending' | 'given-up' | 'abandoned';
  abandoned?: () => boolean;
}

/**
 * The publish path of both adapters. Concurrent publishes are gathered (createMicroBatcher) into one send that
 * carries every record published meanwhile, for every topic: many HTTP requests, one round trip. Flushes never
 * overlap, so one send is in flight per producer (concurrent idempotent sends on one producer fail with
 * OUT_OF_ORDER_SEQUENCE_NUMBER). A publish resolves only once its send was acknowledged. It waits at most
 * its stall bound + PUBLISH_WAIT_BEYOND_STALL_MS (1.8 s when small): then BusUnavailableError, and its records, if
 * still queued, are left out of the next send (PublishRefusedError), or, if already in flight, may still land.
 * A send that fails or does not finish within publishTimeoutMs replaces the producer. A send in flight longer
 * than its stall bound (stallMs, plus STALL_MS_PER_MIB), and a failed one, make new publishes fail at once
 * (createBrokerGate). A publish whose `abandoned` says true when a flush takes it is left out of the send
 * (PublishAbandonedError).
 */
export function createKafkaPublisher(o: KafkaPublisherOptions): KafkaPublisher {
  const gate = createBrokerGate();
  const stallMs = Math.min(o.stallMs ?? DEFAULT_STALL_MS, o.publishTimeoutMs);
  /** How long a send of this many bytes may be in flight before the broker counts as stalled. */
  const stallBound = (bytes: number) => Math.min(o.publishTimeoutMs, stallMs + Math.round((bytes / 1_048_576) * STALL_MS_PER_MIB));
  const batcher = createMicroBatcher<PublishItem>({
    lingerMs: o.lingerMs ?? 2,
    // Bytes, not records: concurrent publishes merge up to the send budget (a larger one goes alone, see splitForSend).
    maxWeight: topicLimits.sendBudgetBytes,
    weight: (item) => item.bytes,
    async flush(items) {
      const hadProbe = items.some((i) => i.probe);
      try {
        for (const i of items) if (i.state === 'queued' && i.abandoned?.() === true) i.state = 'abandoned';
        const live = items.filter((i) => i.state === 'queued');
        if (live.length === 0) return;
        gate.check(live.some((i) => i.probe));
        for (const i of live) i.state = 'sending';
        await send(live);
      } finally {
        gate.flushed(hadProbe);
      }
    },
  });

  async function send(items: PublishItem[]): Promise<void> {
    const byTopic: RecordsByTopic = new Map();
    for (const { topic, records } of items) {
      const list = byTopic.get(topic) ?? [];
      for (const r of records) list.push(r);
      byTopic.set(topic, list);
    }
    const stallAfterMs = stallBound(items.reduce((sum, i) => sum + i.bytes, 0));
    const end = sendSeconds.startTimer();
    let done = false;
    let stalled = false;
    // setImmediate after the timer: when the event loop itself was held up past stallMs, an answer that arrived
    // meanwhile is read (poll phase) before the send is taken for stalled.
    const stallTimer = setTimeout(
      () =>
        setImmediate(() => {
          if (done) return;
          stalled = true;
          gate.stall();
        }),
      stallAfterMs,
    );
    try {
      if (o.connect) await withTimeout(o.connect(), 'connecting to Kafka', o.publishTimeoutMs);
      await withTimeout(o.sendAll(byTopic), 'Kafka send', o.publishTimeoutMs);
      end({ outcome: 'ok' });
      gate.sent();
    } catch (e) {
      end({ outcome: 'error' });
      // A send that stalled and then failed says the broker does not answer, whatever the client named it; one
      // refused for its credentials or certificate will not do better on the next publish either.
      gate.failed(stalled || o.brokerAway(e) || securityFailure(e) !== undefined);
      o.replaceProducer();
      if (e instanceof BusUnavailableError) throw e;
      const Refused = o.tooLarge(e) ? RecordsTooLargeError : BusUnavailableError;
      throw new Refused(`Kafka did not take the records: ${errorSummary(e)}`, { cause: e });
    } finally {
      done = true;
      clearTimeout(stallTimer);
    }
  }

  /**
   * batcher.add(item), or BusUnavailableError once its wait ran out first (the flush goes on without this caller):
   * its own send's stall bound plus PUBLISH_WAIT_BEYOND_STALL_MS, 1.8 s for a small one.
   */
  function sendWithin(item: PublishItem): Promise<void> {
    const waitMs = Math.min(o.publishTimeoutMs, stallBound(item.bytes) + PUBLISH_WAIT_BEYOND_STALL_MS);
    return new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => {
        if (item.state === 'queued') {
          item.state = 'given-up';
          refusals.inc({ reason: 'queued' });
          reject(new PublishRefusedError(`Kafka is not answering: these records waited ${waitMs} ms behind a send in flight and were not sent`));
        } else {
          refusals.inc({ reason: 'in_flight' });
          reject(new BusUnavailableError(`Kafka has not acknowledged the send within ${waitMs} ms; its records may still be written`));
        }
      }, waitMs);
      batcher.add(item).then(
        // Abandoned: none of its records was in the send, whatever became of the send.
        () => (clearTimeout(t), item.state === 'abandoned' ? reject(new PublishAbandonedError()) : resolve()),
        (e: unknown) => (clearTimeout(t), reject(item.state === 'abandoned' ? new PublishAbandonedError() : e)),
      );
    });
  }

  return {
    async publish(topic, records, opts) {
      if (records.length === 0) return;
      // In order: a publish too large for one send is several, one after the other; only the first may be abandoned.
      let abandoned = opts?.abandoned;
      for (const part of splitForSend(records)) {
        const probe = gate.admit();
        await sendWithin({ topic, ...part, probe, state: 'queued', ...(abandoned ? { abandoned } : {}) });
        abandoned = undefined;
      }
    },
    close: () => batcher.close(),
  };
}
