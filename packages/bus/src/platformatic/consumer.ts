import { Consumer, MessagesStreamFallbackModes, MessagesStreamModes, type Message, type MessagesStream } from '@platformatic/kafka';
import type { Logger } from '@shopstream/telemetry';
import { ConsumerFailedError, type BatchContext, type Bus, type BusRecord, type ConsumeOptions, type Subscription } from '../port.js';
import { COMMIT_INTERVAL_MS, FETCH_MAX_WAIT_MS, FETCH_MIN_BYTES, heartbeatIntervalMs } from '../kafkaCommon.js';
import type { PlatformaticKafkaBusOptions } from '../kafkaPlatformatic.js';
import { withTimeout } from '../kafka/timeouts.js';
import { forceClose, headersOf, sleep, type ClientBase } from './client.js';

/** The @platformatic/kafka adapter's consumers: Bus.consume. */

/** Records queued past this, the stream of a subscription is paused until its handlers caught up to half. */
const MAX_QUEUED_RECORDS = 10_000;
/**
 * At most this much of a partition's records (values and keys) per batch, and per partition per fetch: the
 * kafkajs adapter's batches are one fetch of a partition, at most its maxBytesPerPartition, 1 MiB. A handler's
 * transaction stays as long as there, and a consumer killed mid-stream leaves work behind as it would there.
 */
const MAX_BATCH_BYTES = 1024 * 1024;
/** Partitions handled at once by one subscription unless ConsumeOptions.partitionsAtOnce says, as kafkajs' partitionsConsumedConcurrently in kafkajs/consumer.ts. */
const PARTITIONS_AT_ONCE = 3;

/** The consumers of a @platformatic/kafka bus: consume, and close for the bus's close. */
export function platformaticConsumers(
  base: ClientBase,
  opts: Pick<PlatformaticKafkaBusOptions, 'clientId' | 'sessionTimeoutMs' | 'groupInstanceId' | 'fetchMinBytes' | 'fetchMaxWaitMs' | 'commitIntervalMs'>,
  log: Logger,
) {
  const subscriptions = new Set<Subscription>();

  const own: Pick<Bus, 'consume'> = {
    async consume(o) {
      const sub = await subscribe(o);
      subscriptions.add(sub);
      return {
        failed: sub.failed,
        async stop() {
          subscriptions.delete(sub);
          await sub.stop();
        },
      };
    },
  };

  return {
    ...own,
    async close() {
      await Promise.all([...subscriptions].map((s) => s.stop().catch(() => {})));
    },
  };

  /**
   * A consumer group member handing batches of records, per partition, to o.handleBatch.
   *
   * The client's message stream yields records one at a time; they are queued per partition and handed over
   * as batches of at most MAX_BATCH_BYTES, in order (up to o.partitionsAtOnce, else PARTITIONS_AT_ONCE, partitions at once). A batch's
   * position is committed once its handler resolved. A handler that throws gets the same batch again, from
   * its first record, after 500 ms: the records stay queued, never committed.
   *
   * Each group join (the first, a rebalance, a rejoin after the broker was away) starts a new stream: the
   * records queued from the old one are dropped, the handlers in hand finish and commit, and the new stream
   * starts at the committed positions of the partitions now assigned. A stream that fails (its fetches ran out
   * of retries, the broker being away) is replaced after a pause, the same way. Heartbeats are the client's
   * own timer, apart from the handlers: BatchContext.heartbeat has nothing to do.
   */
  async function subscribe(o: ConsumeOptions): Promise<Subscription> {
    const sessionTimeout = opts.sessionTimeoutMs ?? 8_000;
    const rebalanceTimeout = Math.max(sessionTimeout, 30_000);
    const consumer = new Consumer({
      ...base,
      // A JoinGroup is answered once the rebalance completes: after a member's kill -9, when its session ran
      // out. The publish timeout would cut it off (an uncaught "Request timed out" at the first join).
      requestTimeout: rebalanceTimeout + 5_000,
      clientId: opts.clientId,
      groupId: o.groupId,
      ...(opts.groupInstanceId ? { groupInstanceId: opts.groupInstanceId } : {}),
      sessionTimeout,
      rebalanceTimeout,
      heartbeatInterval: heartbeatIntervalMs(sessionTimeout),
      retries: 10,
      retryDelay: 500,
      autocommit: false,
      maxWaitTime: opts.fetchMaxWaitMs ?? FETCH_MAX_WAIT_MS,
      minBytes: opts.fetchMinBytes ?? FETCH_MIN_BYTES,
    });
    const slog = log.child({ groupId: o.groupId });
    // A rejoin that ran out of retries: the loop below starts a new stream, which joins again.
    consumer.on('error', (e: Error) => {
      slog.warn({ err: e }, 'Kafka consumer group error; joining again');
      o.onRunning?.(false, e);
      next();
    });

    let running = true;
    let generation = 0;
    let wake: () => void = () => {};
    /** Ends the current stream's turn: a join happened, the stream failed, or stop() was called. */
    const next = () => {
      generation++;
      wake();
    };
    consumer.on('consumer:group:join', () => {
      o.onRunning?.(true);
      next();
    });

    /** `resumed`: no batch of the partition handled yet in this stream's turn (it started at the committed position). */
    type Queue = { topic: string; partition: number; generation: number; records: BusRecord[]; busy: boolean; resumed: boolean };
    let queues = new Map<string, Queue>();
    let queued = 0;
    let stream: MessagesStream<Buffer, Buffer, Buffer, Buffer> | null = null;
    const workers = new Set<Promise<void>>();
    let slots = Math.max(1, o.partitionsAtOnce ?? PARTITIONS_AT_ONCE);
    const slotWaiters: (() => void)[] = [];
    const acquire = async () => {
      while (slots === 0) await new Promise<void>((r) => slotWaiters.push(r));
      slots--;
    };
    const release = () => {
      slots++;
      slotWaiters.shift()?.();
    };
    // Shutdown steps that wait on the broker give up after 5 s, so a stop ends within the service's shutdown timeout.
    const bounded = (p: Promise<void>, what: string) =>
      withTimeout(p, what, 5_000).catch((e: unknown) => slog.warn({ err: e }, `${what} did not finish cleanly`));

    const work = async (q: Queue) => {
      try {
        while (running && q.generation === generation && q.records.length > 0) {
          await acquire();
          try {
            if (!running || q.generation !== generation) return;
            let bytes = 0;
            let n = 0;
            while (n < q.records.length && (n === 0 || bytes + q.records[n].value.length <= MAX_BATCH_BYTES)) bytes += q.records[n++].value.length + 64;
            const records = q.records.slice(0, n);
            let rewindTo: bigint | null = null;
            const ctx: BatchContext = {
              heartbeat: async () => {},
              isRunning: () => running,
              resumed: q.resumed,
              rewind: (offset) => void (rewindTo = BigInt(offset)),
            };
            try {
              await o.handleBatch({ topic: q.topic, partition: q.partition, records }, ctx);
            } catch (e) {
              slog.warn({ err: e, topic: q.topic, partition: q.partition }, 'batch handler failed; the batch will be delivered again');
              await sleep(500);
              continue;
            }
            if (rewindTo !== null) {
              // The group's position goes back to where the handler resumes, and the stream's turn ends: the next
              // stream starts every partition at its committed position (the others' batches in hand commit first).
              // The partition's earlier batches' position, not committed yet, is dropped, and a commit in flight (a
              // rewind asked mid-stream: a projection's CheckpointLost) settles first, so neither lands after this one.
              // A commit that fails hands the batch to the handler again, which asks again.
              slog.warn({ topic: q.topic, partition: q.partition, from: records[0].offset, to: String(rewindTo) }, 'rewinding the partition');
              try {
                await commits.settleFor(q);
                await consumer.commit({ offsets: [{ topic: q.topic, partition: q.partition, offset: rewindTo, leaderEpoch: -1 }] });
              } catch (e) {
                slog.warn({ err: e, topic: q.topic, partition: q.partition }, 'could not move the group back for a rewind; the batch is handled again');
                await sleep(500);
                continue;
              }
              next();
              return;
            }
            q.resumed = false;
            q.records.splice(0, records.length);
            queued -= records.length;
            if (stream?.isPaused() && queued < MAX_QUEUED_RECORDS / 2) stream.resume();
            commits.later(q, BigInt(records[records.length - 1].offset) + 1n);
          } finally {
            release();
          }
        }
      } finally {
        q.busy = false;
      }
    };
    /**
     * A handled batch's position is committed apart from the handling, and together: every partition handled since
     * the last commit in one OffsetCommit, at most one in flight, and at most one per commitIntervalMs (a commit
     * after a quiet spell goes at once). A commit waits while the group's coordinator is away (its broker died:
     * until another takes the group, retries of up to 5 s), and awaited in the handler's slot it held up every
     * partition behind it. Each stream's turn ends only once its positions are committed (flush, at once).
     */
    const commits = (() => {
      const interval = opts.commitIntervalMs ?? COMMIT_INTERVAL_MS;
      const pending = new Map<string, { topic: string; partition: number; offset: bigint }>();
      let committer: Promise<void> | null = null;
      let inFlight: Promise<void> | null = null;
      let lastAt = 0;
      let urgent = false;
      let wakeCommitter: (() => void) | null = null;
      const run = async () => {
        try {
          while (pending.size > 0) {
            const wait = lastAt + interval - Date.now();
            if (!urgent && wait > 0) {
              await new Promise<void>((resolve) => {
                const t = setTimeout(resolve, wait);
                wakeCommitter = () => {
                  clearTimeout(t);
                  resolve();
                };
              });
              wakeCommitter = null;
              if (pending.size === 0) break;
            }
            const offsets = [...pending.values()].map((p) => ({ topic: p.topic, partition: p.partition, offset: p.offset, leaderEpoch: -1 }));
            pending.clear();
            lastAt = Date.now();
            inFlight = consumer.commit({ offsets }).catch((e: unknown) => {
              // Handled but not committed: delivered again after the next join (at least once), not lost.
              slog.warn(
                { err: e, partitions: offsets.map((o) => `${o.topic}/${o.partition}`) },
                'could not commit handled batches; they will be delivered again',
              );
            });
            await inFlight;
            inFlight = null;
          }
        } finally {
          committer = null;
        }
      };
      return {
        later(q: Queue, offset: bigint) {
          pending.set(`${q.topic}\u0000${q.partition}`, { topic: q.topic, partition: q.partition, offset });
          committer ??= run();
        },
        /** The partition's position not committed yet is dropped, and a commit in flight settles (a rewind's). */
        async settleFor(q: Queue) {
          pending.delete(`${q.topic}\u0000${q.partition}`);
          await inFlight;
        },
        /** Everything handled is committed now (the stream's turn ends). */
        async flush() {
          urgent = true;
          try {
            wakeCommitter?.();
            while (committer) await committer;
          } finally {
            urgent = false;
          }
        },
      };
    })();
    const start = (q: Queue) => {
      if (q.busy) return;
      q.busy = true;
      // On the next turn of the event loop: the rest of the fetch answer joins the batch.
      const w = new Promise<void>((r) => setImmediate(r)).then(() => work(q));
      workers.add(w);
      void w.finally(() => workers.delete(w));
    };
    const take = (m: Message<Buffer, Buffer, Buffer, Buffer>, gen: number) => {
      if (!running || gen !== generation) return;
      const k = `${m.topic}\u0000${m.partition}`;
      let q = queues.get(k);
      if (!q) queues.set(k, (q = { topic: m.topic, partition: m.partition, generation: gen, records: [], busy: false, resumed: true }));
      q.records.push({
        topic: m.topic,
        partition: m.partition,
        offset: m.offset.toString(),
        key: m.key ? m.key.toString() : null,
        value: m.value ?? Buffer.alloc(0),
        headers: headersOf(m.headers),
        timestamp: Number(m.timestamp),
      });
      if (++queued >= MAX_QUEUED_RECORDS) stream?.pause();
      start(q);
    };

    const openStream = () =>
      consumer.consume({
        topics: o.topics,
        mode: MessagesStreamModes.COMMITTED,
        fallbackMode: (o.fromBeginning ?? true) ? MessagesStreamFallbackModes.EARLIEST : MessagesStreamFallbackModes.LATEST,
        autocommit: false,
        maxWaitTime: opts.fetchMaxWaitMs ?? FETCH_MAX_WAIT_MS,
        minBytes: opts.fetchMinBytes ?? FETCH_MIN_BYTES,
        maxBytesPerPartition: MAX_BATCH_BYTES,
      });

    // The first join, before consume() resolves: a consumer that cannot join fails here, as kafkajs' connect does.
    let current = await openStream().catch(async (e: unknown) => {
      await forceClose(consumer).catch(() => {});
      throw e;
    });
    const loop = (async () => {
      let previous: MessagesStream<Buffer, Buffer, Buffer, Buffer> | null = null;
      for (;;) {
        const gen = generation;
        const s = current;
        stream = s;
        previous?.close().catch(() => {});
        previous = null;
        let failed: unknown = null;
        await new Promise<void>((resolve) => {
          wake = resolve;
          // Kept for the stream's life: a stream that errs again, after its turn, must not throw unhandled.
          s.on('error', (e) => {
            failed ??= e;
            resolve();
          });
          s.once('close', resolve);
          s.on('data', (m: Message<Buffer, Buffer, Buffer, Buffer>) => take(m, gen));
          if (gen !== generation || !running) resolve();
        });
        // This stream's turn is over: drop what it queued, let the handlers in hand finish and commit.
        if (gen === generation) generation++;
        s.pause();
        queues = new Map();
        queued = 0;
        while (workers.size > 0) await Promise.all([...workers]);
        await commits.flush();
        stream = null;
        if (!running) {
          await bounded(s.close(), 'closing the consumer stream');
          return;
        }
        if (failed) {
          slog.warn({ err: failed }, 'Kafka consumer stream failed; starting another in 1 s');
          o.onRunning?.(false, failed);
          s.destroy();
          await sleep(1_000);
        } else {
          // Closed after the next one exists, so the consumer keeps its topics and does not join again for it.
          previous = s;
        }
        for (;;) {
          if (!running) {
            await previous?.close().catch(() => {});
            return;
          }
          try {
            current = await openStream();
            break;
          } catch (e) {
            slog.warn({ err: e }, 'could not start a Kafka consumer stream; trying again in 1 s');
            await sleep(1_000);
          }
        }
      }
    })();

    // The loop replaces failed streams itself; it ends on its own only through a bug, which is a death too.
    const failed = loop.then(
      () => new Promise<ConsumerFailedError>(() => {}),
      (e: unknown) => {
        running = false;
        return new ConsumerFailedError(o.groupId, 'loop_failed', `Kafka consumer of ${o.groupId} stopped: ${String(e)}`, { cause: e });
      },
    );
    return {
      failed,
      async stop() {
        running = false;
        next();
        await loop.catch(() => {});
        await bounded(forceClose(consumer), 'leaving the consumer group');
      },
    };
  }
}
