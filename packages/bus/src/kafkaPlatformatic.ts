import {
  Admin,
  Consumer,
  ConfigResourceTypes,
  ConfigSources,
  IncrementalAlterConfigOperationTypes,
  MessagesStreamFallbackModes,
  MessagesStreamModes,
  ProduceAcks,
  Producer,
  SASLMechanisms,
  type Message,
  type MessagesStream,
  type MessageToProduce,
} from '@platformatic/kafka';
import { BusUnavailableError, ConsumerFailedError, type Bus, type BusRecord, type ConsumeOptions, type ReadOptions, type Subscription } from './port.js';
import { partitionFor } from './pglog/partitionFor.js';
import { partitionLag } from './offsetMath.js';
import {
  heartbeatIntervalMs,
  kafkaBus,
  keyPartitionMemo,
  sendUntilAnswered,
  withTimeout,
  type KafkaBusBaseOptions,
  type KafkaAdmin,
  type KafkaSecurity,
  type RecordsByTopic,
} from './kafkaCommon.js';

export interface PlatformaticKafkaBusOptions extends KafkaBusBaseOptions {
  /**
   * Static group membership (KIP-345, group.instance.id): this instance of a service, stable across its
   * restarts. A consumer restarted after a kill -9 takes its place in the group at once, with the partitions
   * it had, instead of joining as a new member held until the dead one's session ran out. The id is per group,
   * so one instance id serves every group of the process. Unset: every start joins as a new member.
   */
  groupInstanceId?: string;
}

type Out = Producer<string, string | Buffer, string, string>;

const SASL_MECHANISMS = {
  plain: SASLMechanisms.PLAIN,
  'scram-sha-256': SASLMechanisms.SCRAM_SHA_256,
  'scram-sha-512': SASLMechanisms.SCRAM_SHA_512,
} as const satisfies Record<NonNullable<KafkaSecurity['sasl']>['mechanism'], string>;

/**
 * Whether a failed send says the broker is away (unreachable, closed the connection, did not answer in
 * time), as opposed to refusing these records (an unknown topic, a record too large): only the first makes
 * publishes fail fast for a moment. @platformatic/kafka gathers the errors of its retries (MultipleErrors).
 */
function brokerAway(e: unknown): boolean {
  const seen = new Set<unknown>();
  const walk = (err: unknown, depth: number): boolean => {
    if (!err || typeof err !== 'object' || depth > 6 || seen.has(err)) return false;
    seen.add(err);
    const x = err as { code?: string; message?: string; errors?: unknown[]; cause?: unknown };
    if (x.code === 'PLT_KFK_NETWORK' || x.code === 'PLT_KFK_TIMEOUT') return true;
    if (/ECONNREFUSED|ECONNRESET|EHOSTUNREACH|ETIMEDOUT|timed out/.test(x.message ?? '')) return true;
    return (x.errors ?? []).some((inner) => walk(inner, depth + 1)) || walk(x.cause, depth + 1);
  };
  return walk(e, 0);
}

/** Whether a Kafka error, or one it gathered, has this protocol error name (apiId), e.g. GROUP_ID_NOT_FOUND. */
function hasApiError(e: unknown, apiId: string): boolean {
  return !!(e as { findBy?: (p: string, v: unknown) => unknown })?.findBy?.('apiId', apiId);
}

/** Whether a failed send says a partition's records were larger than the topic takes. */
const tooLarge = (e: unknown) => hasApiError(e, 'MESSAGE_TOO_LARGE') || hasApiError(e, 'RECORD_LIST_TOO_LARGE');

/** Closes a client and whatever streams it still has open (its close(true) overload returns no promise). */
const forceClose = (c: { close(force: boolean, cb: (e?: Error | null) => void): void }) =>
  new Promise<void>((resolve, reject) => c.close(true, (e) => (e ? reject(e) : resolve())));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const toBuffer = (v: string | Buffer | undefined) => (typeof v === 'string' ? Buffer.from(v, 'utf8') : (v ?? Buffer.alloc(0)));

function headersOf(h: Map<Buffer, Buffer> | Iterable<[Buffer | null, Buffer | null]>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of h) if (k) out[k.toString()] ??= v ? v.toString() : '';
  return out;
}

/** Records queued past this, the stream of a subscription is paused until its handlers caught up to half. */
const MAX_QUEUED_RECORDS = 10_000;
/**
 * At most this much of a partition's records (values and keys) per batch, and per partition per fetch: the
 * kafkajs adapter's batches are one fetch of a partition, at most its maxBytesPerPartition, 1 MiB. A handler's
 * transaction stays as long as there, and a consumer killed mid-stream leaves work behind as it would there.
 */
const MAX_BATCH_BYTES = 1024 * 1024;
/** Partitions handled at once by one subscription, as kafkajs' partitionsConsumedConcurrently in kafka.ts. */
const PARTITIONS_AT_ONCE = 3;
/** Bit 5 of a record batch's attributes: a transaction marker, not a record. */
const IS_CONTROL_BATCH = 1 << 5;

/**
 * The Bus port on @platformatic/kafka (KAFKA_CLIENT=platformatic): the same behaviour as the kafkajs adapter
 * (kafka.ts) on a pure TypeScript client that spends about half the CPU per record. Records land on the same
 * partitions whichever adapter wrote them (Kafka's murmur2 partitioner, partitionFor).
 */
export async function createPlatformaticKafkaBus(opts: PlatformaticKafkaBusOptions): Promise<Bus> {
  const log = opts.logger.child({ component: 'kafka', client: 'platformatic' });
  const publishTimeoutMs = opts.publishTimeoutMs ?? 5_000;
  const { tls, sasl } = opts.security ?? {};
  const base = {
    bootstrapBrokers: opts.brokers,
    // An empty tls object is TLS with the system's CAs, as KafkaSecurity says.
    ...(tls ? { tls } : {}),
    ...(sasl ? { sasl: { mechanism: SASL_MECHANISMS[sasl.mechanism], username: sasl.username, password: sasl.password } } : {}),
    connectTimeout: 3_000,
    requestTimeout: publishTimeoutMs,
    retryDelay: 100,
  };
  const admin = new Admin({ ...base, clientId: `${opts.clientId}-admin`, retries: 3 });

  const newProducer = (): Out =>
    new Producer({
      ...base,
      clientId: opts.clientId,
      idempotent: true,
      acks: ProduceAcks.ALL,
      // Bounded (the client raises 0 or 1 to "forever" for an idempotent producer): a send that cannot complete
      // fails within publishTimeoutMs, and the producer is replaced (see replaceProducer).
      retries: 3,
      autocreateTopics: false,
      serializers: {
        key: (k?: string) => (k === undefined ? undefined : Buffer.from(k, 'utf8')),
        value: (v?: string | Buffer) => (v === undefined ? undefined : toBuffer(v)),
        headerKey: (k?: string) => (k === undefined ? undefined : Buffer.from(k, 'utf8')),
        headerValue: (v?: string) => (v === undefined ? undefined : Buffer.from(v, 'utf8')),
      },
    });
  let producer = newProducer();
  // After a failed or timed-out send the producer is replaced, never reused, for the reason kafka.ts gives:
  // the client advances a partition's sequence number only for partitions that answered, so a batch the broker
  // appended without answering would make the next one with as many records look like its duplicate.
  const replaceProducer = () => {
    const old = producer;
    producer = newProducer();
    void forceClose(old).catch(() => {});
  };

  /** Partition counts of the topics a send goes to (the producer's metadata, cached by the client). */
  const partitionCounts = async (p: Out, topics: string[]): Promise<Map<string, number>> => {
    const md = await p.metadata({ topics });
    return new Map(topics.map((t) => [t, md.topics.get(t)!.partitionsCount]));
  };
  // partitionFor of each key, per topic and partition count: records carry few distinct keys (the shop id).
  const memo = keyPartitionMemo();
  const partitionOf = (topic: string, key: string, count: number): number => memo(topic, key, count, () => partitionFor(key, count));

  /**
   * One send, and again for whatever partition its answer lacks. Every message carries its partition
   * (partitionFor: the one kafkajs' default partitioner picks), so the check of kafka.ts's sendAll needs no
   * partitioner hook; it has not been seen to fire with this client, whose produce retries follow a moved leader.
   */
  const sendAll = async (byTopic: RecordsByTopic): Promise<void> => {
    const p = producer;
    const counts = await partitionCounts(p, [...byTopic.keys()]);
    const messages: MessageToProduce<string, string | Buffer, string, string>[] = [];
    for (const [topic, records] of byTopic) {
      const count = counts.get(topic)!;
      for (const r of records) messages.push({ topic, key: r.key, value: r.value, headers: r.headers, partition: partitionOf(topic, r.key, count) });
    }
    await sendUntilAnswered(log, messages, async (pending) => {
      const { offsets = [] } = await p.send({ messages: pending });
      const answered = new Set(offsets.map((o) => `${o.topic}\u0000${o.partition}`));
      const again = pending.filter((m) => !answered.has(`${m.topic}\u0000${m.partition}`));
      return { again, records: again.length };
    });
  };

  /** Each partition's first offset still held and log end, in partition order. */
  const partitionOffsets = async (topic: string) => {
    const md = await admin.metadata({ topics: [topic], forceUpdate: true });
    const count = md.topics.get(topic)!.partitionsCount;
    const ask = (timestamp: bigint) =>
      admin.listOffsets({ topics: [{ name: topic, partitions: Array.from({ length: count }, (_, partitionIndex) => ({ partitionIndex, timestamp })) }] });
    const [low, high] = await Promise.all([ask(-2n), ask(-1n)]);
    const at = (res: typeof low, p: number) => res[0].partitions.find((x) => x.partitionIndex === p)!.offset;
    return Array.from({ length: count }, (_, partition) => ({ partition, low: at(low, partition), high: at(high, partition) }));
  };

  /** Deletes a consumer group; true when it is gone (or never existed), false while it still has members. */
  const deleteGroup = async (groupId: string): Promise<boolean> => {
    try {
      await admin.deleteGroups({ groups: [groupId] });
      return true;
    } catch (e) {
      if (hasApiError(e, 'GROUP_ID_NOT_FOUND')) return true;
      if (hasApiError(e, 'NON_EMPTY_GROUP')) return false;
      throw e;
    }
  };

  // Fetches for `read`: a consumer that never joins a group (it only sends Fetch requests to partition leaders).
  let reader: Consumer | null = null;
  const readTopic = async (topic: string, ro: ReadOptions): Promise<BusRecord[]> => {
    if (ro.fromOffset !== undefined && ro.partition === undefined) throw new Error('read: fromOffset needs a partition');
    const ends = await partitionOffsets(topic);
    if (ro.partition !== undefined && !ends.some((e) => e.partition === ro.partition))
      throw new Error(`read: topic "${topic}" has no partition ${ro.partition}`);
    const md = await admin.metadata({ topics: [topic] });
    const { id: topicId, partitions } = md.topics.get(topic)!;
    reader ??= new Consumer({ ...base, clientId: `${opts.clientId}-read`, groupId: `${opts.clientId}-read`, retries: 3 });
    const out: BusRecord[] = [];
    for (const e of ends) {
      if (ro.partition !== undefined && e.partition !== ro.partition) continue;
      let next = ro.fromOffset !== undefined && BigInt(ro.fromOffset) > e.low ? BigInt(ro.fromOffset) : e.low;
      const records: BusRecord[] = [];
      let progressAt = Date.now();
      while (next < e.high && (ro.limit === undefined || records.length < ro.limit)) {
        const res = await reader.fetch({
          node: partitions[e.partition].leader,
          maxWaitTime: 100,
          topics: [
            {
              topicId,
              partitions: [{ partition: e.partition, fetchOffset: next, currentLeaderEpoch: -1, lastFetchedEpoch: -1, partitionMaxBytes: 4 * 1024 * 1024 }],
            },
          ],
        });
        const before = next;
        for (const batch of res.responses[0]?.partitions[0]?.records ?? []) {
          next = batch.firstOffset + BigInt(batch.lastOffsetDelta) + 1n > next ? batch.firstOffset + BigInt(batch.lastOffsetDelta) + 1n : next;
          if (batch.attributes & IS_CONTROL_BATCH) continue;
          for (const r of batch.records) {
            const offset = batch.firstOffset + BigInt(r.offsetDelta);
            if (offset < before || offset >= e.high || (ro.limit !== undefined && records.length >= ro.limit)) continue;
            records.push({
              topic,
              partition: e.partition,
              offset: offset.toString(),
              key: r.key ? r.key.toString() : null,
              value: r.value ?? Buffer.alloc(0),
              headers: headersOf(r.headers),
              timestamp: Number(batch.firstTimestamp + r.timestampDelta),
            });
          }
        }
        if (next > before) progressAt = Date.now();
        else if (Date.now() - progressAt > 30_000) throw new BusUnavailableError(`reading ${topic}: no record arrived for 30 s`);
      }
      out.push(...records);
    }
    return out;
  };

  const subscriptions = new Set<Subscription>();

  // The admin calls of kafkaBus in @platformatic/kafka's words.
  const busAdmin: KafkaAdmin = {
    listTopics: () => admin.listTopics(),
    async createTopics(topics) {
      for (const t of topics) {
        try {
          await admin.createTopics({
            topics: [t.topic],
            partitions: t.partitions,
            replicas: t.replicationFactor,
            configs: Object.entries(t.settings).map(([name, value]) => ({ name, value })),
          });
        } catch (e) {
          // Another process created it meanwhile: as if it had existed.
          if (!hasApiError(e, 'TOPIC_ALREADY_EXISTS')) throw e;
        }
      }
    },
    async topicsServed(names, created) {
      const m = await admin.metadata({ topics: names, forceUpdate: true });
      const led = names.every((t) => (m.topics.get(t)?.partitions.length ?? 0) > 0 && m.topics.get(t)!.partitions.every((p) => p.leader >= 0));
      return led && (await Promise.all(created.map((t) => partitionOffsets(t))), true);
    },
    async describeTopics(names) {
      const res = await admin.describeConfigs({ resources: names.map((resourceName) => ({ resourceType: ConfigResourceTypes.TOPIC, resourceName })) });
      return new Map(
        res.map((r) => [
          r.resourceName,
          r.configs.map((e) => ({ name: e.name, value: e.value ?? null, own: e.configSource === ConfigSources.TOPIC_CONFIG, sensitive: e.isSensitive })),
        ]),
      );
    },
    async setTopicConfigs(updates) {
      // IncrementalAlterConfigs sets only the settings named; the topic's others stay as they are.
      await admin.incrementalAlterConfigs({
        resources: updates.map(({ topic, changes }) => ({
          resourceType: ConfigResourceTypes.TOPIC,
          resourceName: topic,
          configs: changes.map((c) => ({ name: c.name, configOperation: IncrementalAlterConfigOperationTypes.SET, value: c.to })),
        })),
      });
    },
    deleteGroup,
    serving: () => admin.metadata({ topics: [], forceUpdate: true }),
  };

  // Many HTTP requests, one round trip; one send in flight; fail fast while the broker is away (createKafkaPublisher).
  const parts = {
    brokers: opts.brokers,
    admin: busAdmin,
    replicationFactor: opts.replicationFactor,
    publishTimeoutMs,
    producer: { lingerMs: opts.lingerMs, stallMs: opts.stallMs, sendAll, brokerAway, tooLarge, replaceProducer },
  };
  return kafkaBus(parts, {
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

    async lag(groupId, topicNames) {
      const out: { topic: string; partition: number; lag: number }[] = [];
      for (const topic of topicNames) {
        const ends = await partitionOffsets(topic);
        const [group] = await admin.listConsumerGroupOffsets({
          groups: [{ groupId, topics: [{ name: topic, partitionIndexes: ends.map((e) => e.partition) }] }],
        });
        const committed = new Map((group?.topics.find((t) => t.name === topic)?.partitions ?? []).map((p) => [p.partitionIndex, p.committedOffset]));
        for (const e of ends) out.push({ topic, partition: e.partition, lag: partitionLag(e, committed.get(e.partition) ?? null) });
      }
      return out;
    },

    async offsets(topic) {
      return (await partitionOffsets(topic)).map((e) => ({ partition: e.partition, low: e.low.toString(), high: e.high.toString() }));
    },

    read: (topic, ro = {}) => readTopic(topic, ro),

    async close() {
      await Promise.all([...subscriptions].map((s) => s.stop().catch(() => {})));
      await forceClose(producer).catch(() => {});
      if (reader) await forceClose(reader).catch(() => {});
      await admin.close().catch(() => {});
    },
  });

  /**
   * A consumer group member handing batches of records, per partition, to o.handleBatch.
   *
   * The client's message stream yields records one at a time; they are queued per partition and handed over
   * as batches of at most MAX_BATCH_BYTES, in order (up to PARTITIONS_AT_ONCE partitions at once). A batch's
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
      maxWaitTime: 100,
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

    type Queue = { topic: string; partition: number; generation: number; records: BusRecord[]; busy: boolean };
    let queues = new Map<string, Queue>();
    let queued = 0;
    let stream: MessagesStream<Buffer, Buffer, Buffer, Buffer> | null = null;
    const workers = new Set<Promise<void>>();
    let slots = PARTITIONS_AT_ONCE;
    const slotWaiters: (() => void)[] = [];
    const acquire = async () => {
      while (slots === 0) await new Promise<void>((r) => slotWaiters.push(r));
      slots--;
    };
    const release = () => {
      slots++;
      slotWaiters.shift()?.();
    };
    const ctx = { heartbeat: async () => {}, isRunning: () => running };
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
            try {
              await o.handleBatch({ topic: q.topic, partition: q.partition, records }, ctx);
            } catch (e) {
              slog.warn({ err: e, topic: q.topic, partition: q.partition }, 'batch handler failed; the batch will be delivered again');
              await sleep(500);
              continue;
            }
            q.records.splice(0, records.length);
            queued -= records.length;
            if (stream?.isPaused() && queued < MAX_QUEUED_RECORDS / 2) stream.resume();
            commitLater(q, BigInt(records[records.length - 1].offset) + 1n);
          } finally {
            release();
          }
        }
      } finally {
        q.busy = false;
      }
    };
    /**
     * A handled batch's position is committed apart from the handling: at most one commit in flight per
     * partition, the newest position waiting behind it. A commit waits while the group's coordinator is away
     * (its broker died: until another takes the group, retries of up to 5 s), and awaited in the handler's
     * slot it held up every partition behind it. Each stream's turn ends only once its commits settled.
     */
    const committing = new Map<string, { next: bigint | null; running: Promise<void> }>();
    const commitLater = (q: Queue, offset: bigint) => {
      const k = `${q.topic}\u0000${q.partition}`;
      const c = committing.get(k);
      if (c) {
        c.next = offset;
        return;
      }
      const entry = { next: offset as bigint | null, running: Promise.resolve() };
      committing.set(k, entry);
      entry.running = (async () => {
        while (entry.next !== null) {
          const at = entry.next;
          entry.next = null;
          await consumer.commit({ offsets: [{ topic: q.topic, partition: q.partition, offset: at, leaderEpoch: -1 }] }).catch((e: unknown) => {
            // Handled but not committed: delivered again after the next join (at least once), not lost.
            slog.warn({ err: e, topic: q.topic, partition: q.partition }, 'could not commit a handled batch; it will be delivered again');
          });
        }
        committing.delete(k);
      })();
    };
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
      if (!q) queues.set(k, (q = { topic: m.topic, partition: m.partition, generation: gen, records: [], busy: false }));
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
        maxWaitTime: 100,
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
        while (committing.size > 0) await Promise.all([...committing.values()].map((c) => c.running));
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
