import { randomUUID } from 'node:crypto';
import kafkajs, {
  Kafka,
  logLevel,
  CompressionTypes,
  Partitioners,
  type Producer,
  type Consumer,
  type Admin,
  type IHeaders,
  type KafkaConfig,
  type SASLOptions,
  type KafkaMessage,
  type LogEntry,
  type ConfigEntries,
  type Message,
  type TopicMessages,
} from 'kafkajs';
import type { Logger } from '@shopstream/telemetry';
import { BusUnavailableError, ConsumerFailedError, type Bus, type BusRecord, type ReadOptions } from './port.js';
import { partitionFor } from './pglog/partitionFor.js';
import { partitionLag } from './offsetMath.js';
import {
  heartbeatIntervalMs,
  kafkaBus,
  keyPartitionMemo,
  securityFailure,
  sendUntilAnswered,
  type KafkaBusBaseOptions,
  type KafkaAdmin,
  type KafkaSecurity,
  type RecordsByTopic,
  type TopicSetting,
} from './kafkaCommon.js';

// kafkajs is CommonJS: Node's ESM loader finds the named exports above in its index.js, not these two enums.
const { ConfigResourceTypes, ConfigSource } = kafkajs;

/**
 * kafkajs has no static membership (group.instance.id) and no option for a consumer's member id: a consumer
 * restarted after a kill -9, or restarted by kafkajs after the broker was away, joins as a new member, and its
 * join is answered once the group's old member's session (KAFKA_SESSION_TIMEOUT_MS) ran out. This adapter uses
 * kafkajs' public API only; @platformatic/kafka (the default, KAFKA_CLIENT=platformatic) rejoins at once as
 * its static member. See docs/operations.md#kafka-client.
 */
export type KafkaBusOptions = KafkaBusBaseOptions;

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

/**
 * Whether a failed send says the broker is away (unreachable, closed the connection, did not answer in
 * time), as opposed to refusing these records (an unknown topic, a record too large): only the first makes
 * publishes fail fast for a moment. kafkajs wraps the last attempt's error (originalError, cause).
 */
function brokerAway(e: unknown): boolean {
  for (let err = e as { name?: string; message?: string; originalError?: unknown; cause?: unknown } | undefined, depth = 0; err && depth < 5; depth++) {
    if (/^KafkaJS(Connection|ConnectionClosed|RequestTimeout|BrokerNotFound)Error$/.test(err.name ?? '')) return true;
    if (/ECONNREFUSED|ECONNRESET|EHOSTUNREACH|ETIMEDOUT|timed out/.test(err.message ?? '')) return true;
    err = (err.originalError ?? err.cause) as typeof err;
  }
  return false;
}

/** Whether a failed send says a partition's records were larger than the topic takes (kafkajs' protocol error type). */
function tooLarge(e: unknown): boolean {
  for (let err = e as { type?: string; originalError?: unknown; cause?: unknown } | undefined, depth = 0; err && depth < 5; depth++) {
    if (err.type === 'MESSAGE_TOO_LARGE' || err.type === 'RECORD_LIST_TOO_LARGE') return true;
    err = (err.originalError ?? err.cause) as typeof err;
  }
  return false;
}

function toHeaders(h: IHeaders | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h ?? {})) {
    if (v === undefined) continue;
    out[k] = Array.isArray(v) ? String(v[0]) : String(v);
  }
  return out;
}

const toRecord = (topic: string, partition: number, m: KafkaMessage): BusRecord => ({
  topic,
  partition,
  offset: m.offset,
  key: m.key ? m.key.toString() : null,
  value: m.value ?? Buffer.alloc(0),
  headers: toHeaders(m.headers),
  timestamp: Number(m.timestamp),
});

/** A kafkajs topic setting as both adapters compare them (kafkajs types configValue as a string; a sensitive one is null). */
const settingOf = (e: ConfigEntries): TopicSetting => ({
  name: e.configName,
  value: e.configValue ?? null,
  own: e.configSource === ConfigSource.TOPIC_CONFIG,
  sensitive: e.isSensitive,
});

// kafkajs warns at every producer start when an idempotent producer's retries are bounded. They are bounded
// on purpose: a send that cannot complete fails within publishTimeoutMs, so ingest answers 503 (nothing
// reported accepted) instead of holding the request; and the producer is replaced after any failed send
// (see replaceProducer), which is what the warning is about. Said once here rather than in every log.
const BOUNDED_RETRIES_WARNING = 'Limiting retries for the idempotent producer';

/**
 * kafkajs logs a refused password or an untrusted certificate at every connection attempt, three lines each, with
 * retries: pages of errors for one cause. The first is kept, as a warning in securityFailure's words; the rest go to
 * debug, and what failed says the cause once more (the start-up attempt's line, the publish's 503, the consumer's restart).
 */
function kafkaLogger(logger: Logger) {
  let securityLogged = false;
  return () =>
    ({ level, log }: LogEntry) => {
      const { message, ...extra } = log;
      const expected = level === logLevel.WARN && message.startsWith(BOUNDED_RETRIES_WARNING);
      let fn: 'error' | 'warn' | 'debug' = level <= logLevel.ERROR ? 'error' : level === logLevel.WARN && !expected ? 'warn' : 'debug';
      const security = fn === 'error' ? securityFailure({ message: `${message} ${String(extra.error ?? '')}` }) : undefined;
      if (security) {
        fn = securityLogged ? 'debug' : 'warn';
        securityLogged = true;
        logger[fn]({ kafka: extra }, security);
        return;
      }
      logger[fn]({ kafka: extra }, message);
    };
}

/** KafkaSecurity in kafkajs' words: `ssl` true for the system's CAs, else the PEM texts; `sasl` as given. */
function connectionConfig(security: KafkaSecurity | undefined): Pick<KafkaConfig, 'ssl' | 'sasl'> {
  const tls = security?.tls;
  return {
    ...(tls ? { ssl: Object.keys(tls).length > 0 ? tls : true } : {}),
    // A copy: kafkajs adds its authenticator, holding the password, to the object it is given (authenticationProvider),
    // and a caller's object spread into another bus's settings would carry it there, with the old password.
    ...(security?.sasl ? { sasl: { ...security.sasl } as SASLOptions } : {}),
  };
}

/** The Bus port on Kafka. kafkajs stays behind this file: another client would replace this file only. */
export async function createKafkaBus(opts: KafkaBusOptions): Promise<Bus> {
  const log = opts.logger.child({ component: 'kafka' });
  const publishTimeoutMs = opts.publishTimeoutMs ?? 5_000;
  const connection = connectionConfig(opts.security);
  const kafka = new Kafka({
    clientId: opts.clientId,
    brokers: opts.brokers,
    ...connection,
    logLevel: logLevel.WARN,
    logCreator: kafkaLogger(log),
    connectionTimeout: 3_000,
    requestTimeout: publishTimeoutMs,
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1_000 },
  });
  const admin: Admin = kafka.admin();
  // Connected on first use, like the producer: a bus over an unreachable broker still exists, so publish
  // can reject with BusUnavailableError and ping() can answer false, instead of the factory throwing.
  let adminConnected: Promise<void> | null = null;
  const connectAdmin = () =>
    (adminConnected ??= admin.connect().catch((e) => {
      adminConnected = null;
      throw e;
    }));
  // The partition count each topic had at its last send, as kafkajs gave it to the partitioner (see `sendAll`).
  const partitionCounts = new Map<string, number>();
  // partitionFor of each key, per topic and partition count: records carry few distinct keys (the shop id).
  const memo = keyPartitionMemo();
  const partitionOf = (topic: string, key: string, count: number) => memo(topic, key, count, () => partitionFor(key, count));
  const defaultPartitioner = Partitioners.DefaultPartitioner();
  const newProducer = (): Producer =>
    kafka.producer({
      // Murmur2 of the key (partitionFor: kafkajs' default partitioner, and the Java client's), remembering each
      // key's partition; and the partition count kafkajs passes, for sendAll's check.
      createPartitioner: () => (args) => {
        const { topic, partitionMetadata, message } = args;
        partitionCounts.set(topic, partitionMetadata.length);
        if ((message.partition !== null && message.partition !== undefined) || typeof message.key !== 'string') return defaultPartitioner(args);
        return partitionOf(topic, message.key, partitionMetadata.length);
      },
      idempotent: true,
      maxInFlightRequests: 1,
      allowAutoTopicCreation: false,
      retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1_000 },
    });
  let producer: Producer = newProducer();
  let producerConnected: Promise<void> | null = null;
  const connectProducer = () =>
    (producerConnected ??= producer.connect().catch((e) => {
      producerConnected = null;
      throw e;
    }));
  // After a failed or timed-out send the producer is replaced, never reused. kafkajs rolls a partition's
  // sequence number back when a produce request fails, a client-side timeout included, although the broker
  // may have appended that batch; the next batch would reuse the sequence, and if it had as many records for
  // that partition the broker would take it for a duplicate: acknowledged, not written, its events lost.
  // A new producer gets a new producer id, so nothing it sends can be deduplicated against the old one's
  // batches (whose records were answered 503, and may still land: a retry then duplicates, never loses).
  const replaceProducer = () => {
    const old = producer;
    producer = newProducer();
    producerConnected = null;
    void old.disconnect().catch(() => {});
  };

  /**
   * sendBatch, and again for whatever it answered without sending. kafkajs 2.2.4 keeps, across the retries
   * of one sendBatch, the answers of the brokers that already answered and retries only the others: when a
   * dead leader's partition moves to a broker that answered for its own partitions in the same send, that
   * partition's records are never sent again, and sendBatch resolves as if they were (tulios/kafkajs#1303;
   * found by `pnpm faults leader-failover`: 69 events answered 202 and never in the log). So every partition
   * a message went to must be in the answer; the messages of a partition that is not are sent again, to the
   * same partition, by the same producer (kafkajs rolled that partition's sequence back when its request
   * failed, so a batch the dead leader did append and replicate is taken by the broker as a duplicate).
   * A message's partition is murmur2 of its key over the partition count kafkajs gave the partitioner
   * (partitionFor), so the check needs nothing of kafkajs but its public partitioner interface and its answer.
   */
  const sendAll = (byTopic: RecordsByTopic): Promise<void> =>
    sendUntilAnswered(
      log,
      [...byTopic].map(([topic, records]): TopicMessages => ({
        topic,
        messages: records.map((r): Message => ({ key: r.key, value: r.value, headers: r.headers })),
      })),
      async (pending) => {
        const answers = await producer.sendBatch({ acks: -1, compression: CompressionTypes.None, topicMessages: pending });
        const answered = new Set(answers.map((a) => `${a.topicName}\u0000${a.partition}`));
        const again: TopicMessages[] = [];
        let records = 0;
        for (const { topic, messages } of pending) {
          const count = partitionCounts.get(topic);
          const sentTo = (m: Message) => m.partition ?? (count === undefined ? undefined : partitionOf(topic, m.key as string, count));
          const missing = messages.filter((m) => !answered.has(`${topic}\u0000${sentTo(m)}`));
          if (missing.length === 0) continue;
          records += missing.length;
          again.push({ topic, messages: missing.map((m) => ({ ...m, partition: sentTo(m) })) });
        }
        return { again, records };
      },
    );

  /**
   * A created topic is ready when every partition answers its offsets (see kafkaTopicMethods). Asked by a
   * client of its own that logs nothing: kafkajs logs each such expected refusal (NOT_LEADER_OR_FOLLOWER) as
   * an error.
   */
  const servesOffsets = async (topics: string[]): Promise<boolean> => {
    const probe = new Kafka({
      clientId: `${opts.clientId}-probe`,
      brokers: opts.brokers,
      ...connection,
      logLevel: logLevel.NOTHING,
      retry: { retries: 0 },
    }).admin();
    try {
      await probe.connect();
      await Promise.all(topics.map((t) => probe.fetchTopicOffsets(t)));
      return true;
    } catch {
      return false;
    } finally {
      await probe.disconnect().catch(() => {});
    }
  };

  /** Deletes a consumer group; true when it is gone (or never existed), false while it still has members. */
  const deleteGroup = async (groupId: string): Promise<boolean> => {
    await connectAdmin();
    try {
      await admin.deleteGroups([groupId]);
      return true;
    } catch (e) {
      const codes = ((e as { groups?: { errorCode?: number; error?: { type?: string } }[] }).groups ?? []).map((g) => g.error?.type);
      // GROUP_ID_NOT_FOUND: nothing to forget.
      if (codes.length > 0 && codes.every((c) => c === 'GROUP_ID_NOT_FOUND')) return true;
      if (codes.length > 0 && codes.every((c) => c === 'NON_EMPTY_GROUP')) return false;
      throw e;
    }
  };

  /**
   * kafkajs has no consumer without a group (no manual assignment): `read` consumes in a group of its own
   * that commits nothing, then deletes it. The log ends are taken first; each partition is done once its
   * record just below that end (or `limit` records) arrived. Offsets are dense on Shopstream's topics (no
   * transactions, no compaction), so that record exists.
   */
  const readTopic = async (topic: string, ro: ReadOptions): Promise<BusRecord[]> => {
    if (ro.fromOffset !== undefined && ro.partition === undefined) throw new Error('read: fromOffset needs a partition');
    await connectAdmin();
    const ends = await admin.fetchTopicOffsets(topic);
    if (ro.partition !== undefined && !ends.some((e) => e.partition === ro.partition))
      throw new Error(`read: topic "${topic}" has no partition ${ro.partition}`);
    const wanted = new Map<number, { from: bigint; last: bigint; records: BusRecord[]; done: boolean }>();
    for (const e of ends) {
      if (ro.partition !== undefined && e.partition !== ro.partition) continue;
      const low = BigInt(e.low);
      const from = ro.fromOffset !== undefined && BigInt(ro.fromOffset) > low ? BigInt(ro.fromOffset) : low;
      if (from < BigInt(e.high) && ro.limit !== 0) wanted.set(e.partition, { from, last: BigInt(e.high) - 1n, records: [], done: false });
    }
    if (wanted.size === 0) return [];

    const groupId = `${opts.clientId}-read-${randomUUID()}`;
    const consumer = kafka.consumer({ groupId, allowAutoTopicCreation: false, maxWaitTimeInMs: 100, retry: { retries: 5 } });
    let progressAt = Date.now();
    let settle!: (e?: unknown) => void;
    const finished = new Promise<void>((resolve, reject) => (settle = (e) => (e ? reject(e) : resolve())));
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      if (!payload.restart) settle(new BusUnavailableError(`reading ${topic} failed: ${payload.error.message}`, { cause: payload.error }));
    });
    const stalled = setInterval(() => {
      if (Date.now() - progressAt > 30_000) settle(new BusUnavailableError(`reading ${topic}: no record arrived for 30 s`));
    }, 1_000);
    try {
      await consumer.connect();
      await consumer.subscribe({ topic, fromBeginning: true });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        eachBatch: async ({ batch, resolveOffset }) => {
          if (batch.messages.length === 0) return;
          resolveOffset(batch.messages[batch.messages.length - 1].offset);
          const w = wanted.get(batch.partition);
          if (!w || w.done) return;
          progressAt = Date.now();
          for (const m of batch.messages) {
            const offset = BigInt(m.offset);
            const prev = w.records.length > 0 ? BigInt(w.records[w.records.length - 1].offset) : w.from - 1n;
            // Before the seek took effect, or fetched again after it: not ours, or had already.
            if (offset <= prev || offset > w.last) continue;
            w.records.push(toRecord(topic, batch.partition, m));
            if (offset === w.last || w.records.length === ro.limit) {
              w.done = true;
              break;
            }
          }
          if ([...wanted.values()].every((x) => x.done)) settle();
        },
      });
      for (const [partition, w] of wanted) consumer.seek({ topic, partition, offset: w.from.toString() });
      const others = ends.map((e) => e.partition).filter((p) => !wanted.has(p));
      if (others.length > 0) consumer.pause([{ topic, partitions: others }]);
      await finished;
    } finally {
      clearInterval(stalled);
      await consumer.disconnect().catch(() => {});
      // The group left as the consumer disconnected; the broker may take a moment to see it empty.
      for (let i = 0; i < 20 && !(await deleteGroup(groupId).catch(() => true)); i++) await new Promise((r) => setTimeout(r, 100));
    }
    return [...wanted.keys()].sort((a, b) => a - b).flatMap((p) => wanted.get(p)!.records);
  };

  const consumers = new Set<Consumer>();

  // The admin calls of kafkaBus in kafkajs' words, each after connectAdmin.
  const busAdmin: KafkaAdmin = {
    listTopics: () => connectAdmin().then(() => admin.listTopics()),
    async createTopics(topics) {
      await connectAdmin();
      // Not waitForLeaders: on KRaft kafkajs' wait can fail with "does not host this topic-partition"
      // while leaders are still being elected (tulios/kafkajs#1563). We poll the metadata ourselves (topicsServed).
      // A topic another process created meanwhile is no error: kafkajs resolves false when every topic it was
      // refused is TOPIC_ALREADY_EXISTS.
      await admin.createTopics({
        waitForLeaders: false,
        topics: topics.map((t) => ({
          topic: t.topic,
          numPartitions: t.partitions,
          replicationFactor: t.replicationFactor,
          configEntries: Object.entries(t.settings).map(([name, value]) => ({ name, value })),
        })),
      });
    },
    async topicsServed(names, created) {
      await connectAdmin();
      const m = await admin.fetchTopicMetadata({ topics: names });
      const led = m.topics.every((t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0));
      return led && (created.length === 0 || (await servesOffsets(created)));
    },
    async describeTopics(names) {
      await connectAdmin();
      const res = await admin.describeConfigs({ includeSynonyms: false, resources: names.map((name) => ({ type: ConfigResourceTypes.TOPIC, name })) });
      return new Map(res.resources.map((r) => [r.resourceName, r.configEntries.map(settingOf)]));
    },
    async setTopicConfigs(updates) {
      // kafkajs speaks only the non-incremental AlterConfigs, which resets every topic setting it is not
      // given to the broker default (max.message.bytes would fall to 1 MiB, refusing large bulk requests).
      // So the topic's own settings, as described before the changes were worked out, are sent back with the
      // changes. Read-modify-write: a setting changed by someone else between the two requests is lost;
      // running `topics ensure` alone avoids that. A setting whose value the broker does not tell (a sensitive
      // one) cannot be sent back: such a topic is refused, before anything is altered.
      const resources = updates.map(({ topic, changes, settings }) => {
        const merged = new Map<string, string>();
        const sensitive: string[] = [];
        for (const e of settings) {
          if (!e.own) continue;
          if (e.sensitive || e.value === null) sensitive.push(e.name);
          else merged.set(e.name, e.value);
        }
        if (sensitive.length > 0) {
          throw new Error(
            `topic ${topic} has sensitive settings (${sensitive.join(', ')}) that cannot be read back; set ${changes.map((c) => c.name).join(', ')} with kafka-configs.sh`,
          );
        }
        for (const c of changes) merged.set(c.name, c.to);
        return { type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [...merged].map(([name, value]) => ({ name, value })) };
      });
      await connectAdmin();
      await admin.alterConfigs({ validateOnly: false, resources });
    },
    deleteGroup,
    async serving() {
      await connectAdmin();
      return admin.describeCluster();
    },
  };

  // Many HTTP requests, one round trip; one send in flight; fail fast while the broker is away (createKafkaPublisher).
  const parts = {
    brokers: opts.brokers,
    admin: busAdmin,
    replicationFactor: opts.replicationFactor,
    publishTimeoutMs,
    producer: { lingerMs: opts.lingerMs, stallMs: opts.stallMs, connect: connectProducer, sendAll, brokerAway, tooLarge, replaceProducer },
  };
  return kafkaBus(parts, {
    async consume(o) {
      const sessionTimeout = opts.sessionTimeoutMs ?? 8_000;
      const consumer = kafka.consumer({
        groupId: o.groupId,
        allowAutoTopicCreation: false,
        maxWaitTimeInMs: 100,
        retry: { retries: 10 },
        sessionTimeout,
        heartbeatInterval: heartbeatIntervalMs(sessionTimeout),
      });
      consumer.on(consumer.events.GROUP_JOIN, () => o.onRunning?.(true));
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
        partitionsConsumedConcurrently: 3,
        eachBatch: async ({ batch, heartbeat, isRunning, isStale, resolveOffset }) => {
          if (batch.messages.length === 0 || !isRunning() || isStale()) return;
          const records = batch.messages.map((m) => toRecord(batch.topic, batch.partition, m));
          try {
            await o.handleBatch({ topic: batch.topic, partition: batch.partition, records }, { heartbeat, isRunning: () => running && isRunning() });
          } catch (e) {
            log.warn({ err: e, topic: batch.topic, partition: batch.partition, groupId: o.groupId }, 'batch handler failed; the batch will be delivered again');
            // Back to the last committed position, so nothing after a failed record is taken as done.
            consumer.seek({ topic: batch.topic, partition: batch.partition, offset: batch.messages[0].offset });
            await new Promise((r) => setTimeout(r, 500));
            return;
          }
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

    async lag(groupId, topicNames) {
      const out: { topic: string; partition: number; lag: number }[] = [];
      await connectAdmin();
      const committed = await admin.fetchOffsets({ groupId, topics: topicNames });
      for (const t of committed) {
        const ends = await admin.fetchTopicOffsets(t.topic);
        for (const p of t.partitions) {
          const end = ends.find((e) => e.partition === p.partition);
          if (!end) continue;
          out.push({ topic: t.topic, partition: p.partition, lag: partitionLag(end, p.offset) });
        }
      }
      return out;
    },

    async offsets(topic) {
      await connectAdmin();
      const rows = await admin.fetchTopicOffsets(topic);
      return rows.map((r) => ({ partition: r.partition, low: r.low, high: r.high })).sort((a, b) => a.partition - b.partition);
    },

    read: (topic, ro = {}) => readTopic(topic, ro),

    async close() {
      await Promise.all([...consumers].map((c) => c.disconnect().catch(() => {})));
      await producer.disconnect().catch(() => {});
      await admin.disconnect().catch(() => {});
    },
  });
}
