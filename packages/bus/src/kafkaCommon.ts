import { topicLimits } from '@shopstream/contracts';
import { counter, histogram, type Logger } from '@shopstream/telemetry';
import { BusUnavailableError, RecordsTooLargeError, type Bus, type ConfigChange, type OutgoingRecord, type TopicSpec } from './port.js';
import { createMicroBatcher } from './microBatcher.js';
import { splitForSend } from './sendSize.js';

/** What both Kafka adapters (kafkajs in kafka.ts, @platformatic/kafka in kafkaPlatformatic.ts) share. */

/**
 * TLS and SASL of every connection to the brokers, as @shopstream/config's kafkaConnection reads them from
 * KAFKA_SSL* and KAFKA_SASL_*: `tls` present (even empty: the system's CAs) is TLS; PEM texts, not paths.
 */
export interface KafkaSecurity {
  tls?: { ca?: string; cert?: string; key?: string };
  sasl?: { mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512'; username: string; password: string };
}

/** What both adapters' factories take (createKafkaBus, createPlatformaticKafkaBus); each adds its own. */
export interface KafkaBusBaseOptions {
  brokers: string[];
  /** TLS and SASL; unset: plaintext. */
  security?: KafkaSecurity;
  clientId: string;
  replicationFactor: number;
  logger: Logger;
  /** How long publish may wait for the broker before it gives up with BusUnavailableError. */
  publishTimeoutMs?: number;
  /** How long concurrent publishes are gathered into one send. */
  lingerMs?: number;
  /**
   * A consumer group member that sends no heartbeat for this long is dropped. After a kill -9, a restarted
   * member joins only once the dead one's session ran out, so this bounds how long a projector stays away.
   * Default 8 s (heartbeats every second, heartbeatIntervalMs); the broker refuses less than its
   * group.min.session.timeout.ms (6 s).
   */
  sessionTimeoutMs?: number;
  /**
   * A send in flight longer than this (plus 250 ms per MiB it carries) marks the broker stalled: new publishes
   * fail at once until a send succeeds, and each publish waits at most this plus 800 ms. Default 1 s.
   */
  stallMs?: number;
}

/**
 * The consumers' heartbeat interval for a session timeout: at most a second. A member learns that the group is
 * rebalancing only from its next heartbeat's answer, so after a member's kill -9 its partitions move once the
 * session ran out plus up to one interval: 8 s + 1 s, where a third of the session (2.5 s) made it up to 10.5 s.
 * A heartbeat is a tiny request; one a second per member is nothing to the broker.
 */
export const heartbeatIntervalMs = (sessionTimeoutMs: number): number => Math.max(100, Math.min(1_000, Math.floor(sessionTimeoutMs / 3.2)));

/** After a send failed because the broker is away, how long until the next probe may try it (see createBrokerGate). */
export const FAIL_FAST_MS = 1_000;

const resentRecords = counter(
  'shopstream_kafka_records_resent_total',
  'Records sent again because Kafka answered a send without their partition (a leader moved during it; kafkajs#1303).',
);
const sendSeconds = histogram('shopstream_kafka_send_seconds', 'Time of one Kafka produce request (a micro-batch), by outcome.', ['outcome']);

const refusals = counter(
  'shopstream_kafka_publish_refusals_total',
  'Publishes answered BusUnavailableError without waiting for a send, by reason: stalled (a send has been in flight longer than the stall bound), away (a send failed: only a probe goes), queued (gave up behind a send in flight, not sent), in_flight (gave up on its own send, which may still land).',
  ['reason'],
);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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

/** Node's codes for a peer certificate that does not verify (tls.connect's errors). */
const UNTRUSTED_CERT =
  /^(SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT(_LOCALLY)?|CERT_HAS_EXPIRED|CERT_NOT_YET_VALID|CERT_UNTRUSTED|ERR_TLS_CERT_ALTNAME_INVALID)$/;

/** Node's messages for the same (kafkajs logs the message alone). */
const UNTRUSTED_CERT_MESSAGE =
  /unable to verify the first certificate|self[- ]signed certificate|unable to get (local )?issuer certificate|certificate has expired|Hostname\/IP does not match/;

/**
 * Why a Kafka client could not connect, in one sentence an operator can act on, when the cause is the
 * connection's security rather than the broker being away: the SASL credentials refused, the broker's
 * certificate not trusted, a TLS handshake with a listener that does not speak TLS. Undefined otherwise.
 * Walks the errors either client wraps (kafkajs: originalError, cause; @platformatic/kafka: errors, cause).
 */
export function securityFailure(e: unknown): string | undefined {
  const seen = new Set<unknown>();
  const walk = (err: unknown, depth: number): string | undefined => {
    if (!err || typeof err !== 'object' || depth > 8 || seen.has(err)) return undefined;
    seen.add(err);
    const x = err as { name?: string; code?: string; message?: string; errors?: unknown[]; cause?: unknown; originalError?: unknown };
    const message = x.message ?? '';
    if (x.name === 'KafkaJSSASLAuthenticationError' || /SASL|SCRAM|[Aa]uthentication failed|AUTHENTICATION_FAILED|ILLEGAL_SASL_STATE/.test(message)) {
      return `Kafka refused the SASL credentials (KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD): ${message}`;
    }
    if ((x.code && UNTRUSTED_CERT.test(x.code)) || UNTRUSTED_CERT_MESSAGE.test(message)) {
      return `Kafka's TLS certificate is not trusted (${x.code ? `${x.code}: ` : ''}${message}): set KAFKA_SSL_CA_FILE to the CA that signed it`;
    }
    if (/before secure TLS connection was established|wrong version number|packet length too long|EPROTO/.test(message)) {
      return `the TLS handshake with Kafka failed (${message}): does that listener speak TLS (KAFKA_SSL), or does it need a client certificate (KAFKA_SSL_CERT_FILE)?`;
    }
    for (const inner of [...(x.errors ?? []), x.originalError, x.cause]) {
      const found = walk(inner, depth + 1);
      if (found) return found;
    }
    return undefined;
  };
  return walk(e, 0);
}

/** p, or BusUnavailableError once it has not settled within ms. */
export function withTimeout<T>(p: Promise<T>, what: string, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new BusUnavailableError(`${what} timed out after ${ms} ms`)), ms);
    p.then(
      (v) => (clearTimeout(t), resolve(v)),
      (e) => (clearTimeout(t), reject(e)),
    );
  });
}

/** Asks every 100 ms until ready() answers true; BusUnavailableError with failure()'s words after 30 s. */
async function within30s(ready: () => Promise<boolean>, failure: () => string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (await ready()) return;
    if (Date.now() > deadline) throw new BusUnavailableError(failure());
    await sleep(100);
  }
}

/** The settings a topic is created with: Shopstream's limits, then the spec's own. */
function topicCreateConfig(spec: TopicSpec, replicationFactor: number): Record<string, string> {
  return {
    'max.message.bytes': String(topicLimits.maxMessageBytes),
    // acks=-1 means "every in-sync replica": with the broker's default of 1, a leader whose followers
    // fell behind acknowledges alone, and losing it loses answered events. 2 of 3 in production.
    'min.insync.replicas': String(Math.min(2, replicationFactor)),
    ...spec.config,
  };
}

/** A topic setting as the broker describes it: `own` when the topic itself sets it, not a broker default. */
export interface TopicSetting {
  name: string;
  value: string | null;
  own: boolean;
  /**
   * The broker does not tell its value (value null): a client whose alter replaces every setting of a topic
   * (kafkajs, see kafka.ts) cannot send it back, so it refuses to change such a topic's settings.
   */
  sensitive: boolean;
}

/** A topic ensureTopics creates, as it creates it. */
export interface NewTopic {
  topic: string;
  partitions: number;
  replicationFactor: number;
  /** Shopstream's limits, then the spec's own settings (topicCreateConfig). */
  settings: Record<string, string>;
}

/** What alignTopicConfigs changes on one topic, with every setting the topic had when the changes were worked out. */
export interface TopicConfigUpdate {
  topic: string;
  changes: ConfigChange[];
  settings: TopicSetting[];
}

/** The admin calls the bus's topic methods (kafkaTopicMethods) need, in each Kafka client's own words. */
export interface KafkaTopicAdmin {
  listTopics(): Promise<string[]>;
  /** Creates the topics; one that another process created meanwhile is no error. */
  createTopics(topics: NewTopic[]): Promise<void>;
  /**
   * Every partition of `names` has a leader, and each of `created` answers its offsets. Rejecting counts as
   * not yet.
   */
  topicsServed(names: string[], created: string[]): Promise<boolean>;
  /** Every setting in effect per topic, with where it comes from (the topic itself, or a broker default). */
  describeTopics(names: string[]): Promise<Map<string, TopicSetting[]>>;
  /** Sets each update's changes on its topic; every other own setting of the topics stays as it is. */
  setTopicConfigs(updates: TopicConfigUpdate[]): Promise<void>;
}

/** The specs of alignTopicConfigs that set topic settings, of the topics that exist (it creates none). */
async function specsToAlign(specs: TopicSpec[], listTopics: () => Promise<string[]>): Promise<TopicSpec[]> {
  const wanted = specs.filter((s) => s.config && Object.keys(s.config).length > 0);
  if (wanted.length === 0) return [];
  const existing = new Set(await listTopics());
  return wanted.filter((s) => existing.has(s.topic));
}

/** What setting spec's config on its topic changes, given the topic's settings now. */
function configChanges(spec: TopicSpec, settings: TopicSetting[]): ConfigChange[] {
  const own = new Map(settings.filter((s) => s.own).map((s) => [s.name, s]));
  const changes: ConfigChange[] = [];
  for (const [name, to] of Object.entries(spec.config ?? {})) {
    const current = own.get(name);
    if (current?.value === to) continue;
    const effective = current ?? settings.find((s) => s.name === name);
    changes.push({ topic: spec.topic, name, from: effective?.value ?? null, inherited: current === undefined, to });
  }
  return changes;
}

/**
 * The broker answers a change of settings before it applies it (KRaft: once the controller wrote the record),
 * so a describe right after may still show the old values. Resolves with the changes once every one reads
 * back as the topic's own setting, as the port says; BusUnavailableError after 30 s.
 */
async function untilApplied(changes: ConfigChange[], describe: (topics: string[]) => Promise<Map<string, TopicSetting[]>>): Promise<ConfigChange[]> {
  const topics = [...new Set(changes.map((c) => c.topic))];
  let pending = changes;
  await within30s(
    async () => {
      const now = await describe(topics);
      pending = changes.filter((c) => !(now.get(c.topic) ?? []).some((s) => s.name === c.name && s.value === c.to && s.own));
      return pending.length === 0;
    },
    () => `Kafka has not applied ${pending.map((c) => `${c.topic} ${c.name}=${c.to}`).join(', ')} after 30 s`,
  );
  return changes;
}

/** The topic methods of both adapters' Bus: one algorithm, each client's admin calls behind `admin`. */
function kafkaTopicMethods(admin: KafkaTopicAdmin, replicationFactor: number): Pick<Bus, 'ensureTopics' | 'alignTopicConfigs' | 'topicConfigs'> {
  return {
    async ensureTopics(specs) {
      const existing = new Set(await admin.listTopics());
      const missing = specs.filter((s) => !existing.has(s.topic));
      if (missing.length > 0) {
        await admin.createTopics(
          missing.map((s) => ({ topic: s.topic, partitions: s.partitions, replicationFactor, settings: topicCreateConfig(s, replicationFactor) })),
        );
      }
      // A new partition's leader named in the metadata may not serve it yet (NOT_LEADER_OR_FOLLOWER on the first
      // ListOffsets or Produce): ready when every partition has a leader and the new topics answer their offsets.
      const names = specs.map((s) => s.topic);
      const created = missing.map((s) => s.topic);
      await within30s(
        () => admin.topicsServed(names, created).catch(() => false),
        () => `Kafka topics have no leaders after 30 s: ${names.join(', ')}`,
      );
    },

    async alignTopicConfigs(specs) {
      const present = await specsToAlign(specs, () => admin.listTopics());
      if (present.length === 0) return [];
      const described = await admin.describeTopics(present.map((s) => s.topic));
      const updates = present.flatMap((spec): TopicConfigUpdate[] => {
        const settings = described.get(spec.topic) ?? [];
        const changes = configChanges(spec, settings);
        return changes.length > 0 ? [{ topic: spec.topic, changes, settings }] : [];
      });
      if (updates.length === 0) return [];
      await admin.setTopicConfigs(updates);
      return untilApplied(
        updates.flatMap((u) => u.changes),
        (topics) => admin.describeTopics(topics),
      );
    },

    // Own and default settings alike; a setting the broker describes without a value (a sensitive one) is left out.
    async topicConfigs(names) {
      if (names.length === 0) return {};
      const described = await admin.describeTopics(names);
      return Object.fromEntries(
        names.map((t) => [t, Object.fromEntries((described.get(t) ?? []).flatMap((s) => (s.value === null ? [] : [[s.name, s.value]])))]),
      );
    },
  };
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
 * moved during it; kafkajs#1303, see kafka.ts's sendAll), at most 5 sends in all. send(pending) makes one send
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
 * While the broker is away (a send failed to reach it) or stalled (a send has been in flight longer than
 * stallMs), publishes fail at once (PublishRefusedError: 503 with Retry-After) instead of each waiting for a
 * send that hangs. While away, one publish at a time, at most every FAIL_FAST_MS, is let through as a probe
 * (its batch tries Kafka); only a send that succeeds ends it, however long that takes. Like the database's
 * circuit breaker (connectPostgres): a broker outage or stall is answered in milliseconds, and ingest takes
 * events again within about a second of the broker's return.
 */
function createBrokerGate() {
  let away = false;
  let stalled = false;
  let probing = false;
  let failedAt = 0;
  const refuse = (reason: 'stalled' | 'away', message: string): never => {
    refusals.inc({ reason });
    throw new PublishRefusedError(message);
  };
  return {
    /** Whether this publish may go to Kafka (true: it is the probe); throws while the broker is stalled or away. */
    admit(): boolean {
      if (stalled) refuse('stalled', 'Kafka is not answering: a send has been waiting for it too long');
      if (!away) return false;
      if (probing) refuse('away', 'Kafka is unavailable: a send is trying it again');
      if (Date.now() - failedAt < FAIL_FAST_MS) refuse('away', 'Kafka is unavailable: a send failed less than a second ago');
      probing = true;
      return true;
    },
    /** Before a flush: a batch admitted before the broker went away, flushed after, fails at once too. */
    check(probe: boolean): void {
      if (away && !probe) refuse('away', 'Kafka is unavailable: a send failed less than a second ago');
    },
    stall(): void {
      stalled = true;
    },
    sent(): void {
      away = false;
      stalled = false;
    },
    failed(brokerAway: boolean): void {
      away = brokerAway;
      stalled = false;
      if (away) failedAt = Date.now();
    },
    flushed(probe: boolean): void {
      if (probe) probing = false;
    },
  };
}

/**
 * A publish refused before any of its records was sent (the broker is stalled or away, see createBrokerGate):
 * none of them can land, so sending them again later makes no copy. A BusUnavailableError like any other for
 * callers that do not care (ingest answers 503 either way); the outbox relay does care (outbox.ts).
 */
export class PublishRefusedError extends BusUnavailableError {
  constructor(message: string) {
    super(message);
    this.name = 'PublishRefusedError';
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
interface KafkaPublisherOptions {
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
  /** After a failed or timed-out send: a new producer for the next send, the failed one never reused (see kafka.ts). */
  replaceProducer(): void;
}

interface KafkaPublisher {
  /** Bus.publish: resolves once the broker acknowledged every record; BusUnavailableError otherwise. */
  publish(topic: string, records: OutgoingRecord[]): Promise<void>;
  /** Sends what is pending and waits for the send in flight. */
  close(): Promise<void>;
}

/** One publish's share of a micro-batch: queued until a flush takes it; given up (never sent) when its wait ran out first. */
interface PublishItem {
  topic: string;
  records: OutgoingRecord[];
  bytes: number;
  probe: boolean;
  state: 'queued' | 'sending' | 'given-up';
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
 * (createBrokerGate).
 */
function createKafkaPublisher(o: KafkaPublisherOptions): KafkaPublisher {
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
        () => (clearTimeout(t), resolve()),
        (e: unknown) => (clearTimeout(t), reject(e)),
      );
    });
  }

  return {
    async publish(topic, records) {
      if (records.length === 0) return;
      // In order: a publish too large for one send is several, one after the other.
      for (const part of splitForSend(records)) {
        const probe = gate.admit();
        await sendWithin({ topic, ...part, probe, state: 'queued' });
      }
    },
    close: () => batcher.close(),
  };
}

/** The admin calls of a Kafka adapter's Bus that kafkaBus makes, in the client's own words. */
export interface KafkaAdmin extends KafkaTopicAdmin {
  /** Deletes a consumer group; true when it is gone (or never existed), false while it still has members. */
  deleteGroup(groupId: string): Promise<boolean>;
  /** Resolves once the bus serves: Kafka answered a request any live cluster answers at once. Bus.ping. */
  serving(): Promise<unknown>;
}

/** What kafkaBus makes a Bus of, from an adapter. */
interface KafkaBusParts {
  /** The bootstrap brokers, as the bus describes where it is. */
  brokers: string[];
  admin: KafkaAdmin;
  replicationFactor: number;
  /** How long a publish may wait for the broker (createKafkaPublisher), and ping for its answer. */
  publishTimeoutMs: number;
  /** The adapter's producer, for createKafkaPublisher. */
  producer: Omit<KafkaPublisherOptions, 'publishTimeoutMs'>;
}

/** What each adapter's Bus has in its own client's words. */
type KafkaBusOwn = Omit<
  Bus,
  | 'kind'
  | 'features'
  | 'description'
  | 'messagingSystem'
  | 'selfManaged'
  | 'ensureTopics'
  | 'alignTopicConfigs'
  | 'topicConfigs'
  | 'publish'
  | 'deleteGroup'
  | 'ping'
>;

/**
 * A Kafka adapter's Bus: what both adapters are alike (a Kafka bus whose group members share partitions, the
 * topic methods over the adapter's admin, deleteGroup and ping, the publish path of createKafkaPublisher over
 * the adapter's producer, closed before the rest), and its own methods.
 */
export function kafkaBus(o: KafkaBusParts, own: KafkaBusOwn): Bus {
  const publisher = createKafkaPublisher({ ...o.producer, publishTimeoutMs: o.publishTimeoutMs });
  return {
    kind: 'kafka',
    features: { consumerGroupsSharePartitions: true },
    description: `Kafka at ${o.brokers.join(',')}`,
    messagingSystem: 'kafka',
    selfManaged: false,
    ...kafkaTopicMethods(o.admin, o.replicationFactor),
    publish: publisher.publish,
    async deleteGroup(groupId) {
      if (!(await o.admin.deleteGroup(groupId))) throw new Error(`consumer group ${groupId} still has members: stop them first`);
    },
    async ping() {
      try {
        await withTimeout(o.admin.serving(), 'Kafka ping', o.publishTimeoutMs);
        return true;
      } catch {
        return false;
      }
    },
    ...own,
    async close() {
      await publisher.close();
      await own.close();
    },
  };
}
