import type { Consumer, IHeaders, Kafka, KafkaMessage } from 'kafkajs';
import type { Logger } from '@shopstream/telemetry';
import { ConsumerFailedError, type BatchContext, type Bus, type BusRecord } from '../port.js';
import { FETCH_MAX_WAIT_MS, FETCH_MIN_BYTES, heartbeatIntervalMs, type KafkaBusBaseOptions } from '../kafkaCommon.js';

/** The kafkajs adapter's consumers: Bus.consume, and their records. */

/**
 * A short label for why a kafkajs consumer died, for shopstream_consumer_restarts_total: the protocol
 * error's type where there is one (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ...), else the error's name.
 */
function crashReason(e: unknown): string {
  for (let err = e as { type?: string; name?: string; originalError?: unknown; cause?: unknown } | undefined, depth = 0; err && depth < 5; depth++) {
    if (err.type) return err.type;
    const inner = (err.originalError ?? err.cause) as typeof err;
    if (!inner) return err.name ?? 'error';
    err = inner;
  }
  return 'error';
}

function toHeaders(h: IHeaders | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h ?? {})) {
    if (v === undefined) continue;
    out[k] = Array.isArray(v) ? String(v[0]) : String(v);
  }
  return out;
}

export const toRecord = (topic: string, partition: number, m: KafkaMessage): BusRecord => ({
  topic,
  partition,
  offset: m.offset,
  key: m.key ? m.key.toString() : null,
  value: m.value ?? Buffer.alloc(0),
  headers: toHeaders(m.headers),
  timestamp: Number(m.timestamp),
});

/** The consumers of a kafkajs bus: consume, and close for the bus's close. */
export function kafkajsConsumers(kafka: Kafka, opts: Pick<KafkaBusBaseOptions, 'sessionTimeoutMs' | 'fetchMinBytes' | 'fetchMaxWaitMs'>, log: Logger) {
  const consumers = new Set<Consumer>();

  const own: Pick<Bus, 'consume'> = {
    async consume(o) {
      const sessionTimeout = opts.sessionTimeoutMs ?? 8_000;
      const consumer = kafka.consumer({
        groupId: o.groupId,
        allowAutoTopicCreation: false,
        maxWaitTimeInMs: opts.fetchMaxWaitMs ?? FETCH_MAX_WAIT_MS,
        minBytes: opts.fetchMinBytes ?? FETCH_MIN_BYTES,
        retry: { retries: 10 },
        sessionTimeout,
        heartbeatInterval: heartbeatIntervalMs(sessionTimeout),
      });
      /** Partitions with a batch handled since the last join: the first batch of any other is `resumed`. */
      const handledSinceJoin = new Set<string>();
      consumer.on(consumer.events.GROUP_JOIN, () => {
        handledSinceJoin.clear();
        o.onRunning?.(true);
      });
      consumers.add(consumer);
      let running = true;
      let fail!: (e: ConsumerFailedError) => void;
      const failed = new Promise<ConsumerFailedError>((resolve) => (fail = resolve));
      consumer.on(consumer.events.CRASH, ({ payload }) => {
        if (!running) return;
        // kafkajs restarts it (a retriable error): not consuming until it has joined again.
        if (payload.restart) return o.onRunning?.(false, payload.error);
        // kafkajs gave up on this consumer (an expulsion, UNKNOWN_MEMBER_ID, a non-retriable error): it consumes
        // nothing more; whoever recreates it (the runner's supervisor) joins as a new member.
        running = false;
        consumers.delete(consumer);
        const reason = crashReason(payload.error);
        fail(new ConsumerFailedError(o.groupId, reason, `Kafka consumer of ${o.groupId} crashed: ${payload.error.message}`, { cause: payload.error }));
        void consumer.disconnect().catch(() => {});
      });
      const joined = async () => {
        await consumer.connect();
        for (const topic of o.topics) await consumer.subscribe({ topic, fromBeginning: o.fromBeginning ?? true });
      };
      await joined().catch(async (e: unknown) => {
        running = false;
        consumers.delete(consumer);
        await consumer.disconnect().catch(() => {});
        throw e;
      });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        // Partitions are independent (order is promised per key only): overlap their database round trips.
        partitionsConsumedConcurrently: Math.max(1, o.partitionsAtOnce ?? 3),
        eachBatch: async ({ batch, heartbeat, isRunning, isStale, resolveOffset }) => {
          if (batch.messages.length === 0 || !isRunning() || isStale()) return;
          const records = batch.messages.map((m) => toRecord(batch.topic, batch.partition, m));
          const partitionKey = `${batch.topic}\u0000${batch.partition}`;
          let rewindTo: string | null = null;
          const ctx: BatchContext = {
            heartbeat,
            isRunning: () => running && isRunning(),
            resumed: !handledSinceJoin.has(partitionKey),
            rewind: (offset: string) => void (rewindTo = offset),
          };
          try {
            await o.handleBatch({ topic: batch.topic, partition: batch.partition, records }, ctx);
          } catch (e) {
            log.warn({ err: e, topic: batch.topic, partition: batch.partition, groupId: o.groupId }, 'batch handler failed; the batch will be delivered again');
            // Back to the last committed position, so nothing after a failed record is taken as done.
            consumer.seek({ topic: batch.topic, partition: batch.partition, offset: batch.messages[0].offset });
            await new Promise((r) => setTimeout(r, 500));
            return;
          }
          if (rewindTo !== null) {
            // Not committed: the next fetch of the partition starts at the handler's position.
            log.warn({ topic: batch.topic, partition: batch.partition, groupId: o.groupId, from: records[0].offset, to: rewindTo }, 'rewinding the partition');
            consumer.seek({ topic: batch.topic, partition: batch.partition, offset: rewindTo });
            return;
          }
          handledSinceJoin.add(partitionKey);
          const last = records[records.length - 1];
          const next = (BigInt(last.offset) + 1n).toString();
          // kafkajs fetches from the resolved offset, not the committed one: without this the same batch
          // comes back on every fetch.
          resolveOffset(last.offset);
          await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: next }]);
          await heartbeat();
        },
      });
      return {
        failed,
        async stop() {
          running = false;
          consumers.delete(consumer);
          await consumer.disconnect();
        },
      };
    },
  };

  return {
    ...own,
    async close() {
      await Promise.all([...consumers].map((c) => c.disconnect().catch(() => {})));
    },
  };
}
