/** A record to publish. Records with the same key land in the same partition, in publish order. */
export interface OutgoingRecord {
  key: string;
  value: string | Buffer;
  headers?: Record<string, string>;
}

export interface BusRecord {
  topic: string;
  partition: number;
  /** Decimal string: Kafka offsets are 64-bit. */
  offset: string;
  key: string | null;
  value: Buffer;
  headers: Record<string, string>;
  /** When the log took the record, ms since the epoch. */
  timestamp: number;
}

/** Records of one partition, in log order. */
export interface Batch {
  topic: string;
  partition: number;
  records: BusRecord[];
}

export interface BatchContext {
  /** Keep the group membership alive during a long batch. */
  heartbeat(): Promise<void>;
  /** False once stop() was called: a long handler may end early by throwing nothing and returning. */
  isRunning(): boolean;
  /**
   * True for the first batch of a partition since it was assigned to this member (a start, a rebalance, a
   * rejoin) or rewound: its first record is where the group's committed position said to resume. A handler that
   * keeps its own position (a projection's checkpoint in PostgreSQL) compares the two there.
   */
  resumed: boolean;
  /**
   * Delivers this partition again from `offset` (below the batch's first record), instead of going on: the
   * handler's own position is behind the group's committed one (its store lost work the group had committed:
   * PostgreSQL restored from a backup). The batch is not committed; the partition's records come again, in
   * order, from `offset`, which must be one the log still holds (Bus.offsets' `low` or above: below it, what an
   * adapter does is its client's answer to an offset out of range). Call before returning.
   */
  rewind(offset: string): void;
}

export interface ConsumeOptions {
  groupId: string;
  topics: string[];
  /** Where a group with no committed position starts. Default: the beginning. */
  fromBeginning?: boolean;
  /**
   * Handles the batch. Its position is committed only after this resolves; when it throws, the batch
   * is delivered again (after a short backoff), from the last committed position.
   */
  handleBatch(batch: Batch, ctx: BatchContext): Promise<void>;
  /**
   * How many partitions' batches may be in handleBatch at once (each partition's one after the other). Default 3. A
   * handler that bounds its own work (a live projection gathers them into a few transactions) takes more. Every adapter
   * follows it, the Postgres-log bus on PGlite excepted (one connection: one batch at a time there).
   */
  partitionsAtOnce?: number;
  /**
   * Told when the consumer stops consuming for a while without dying for good (the client restarts it
   * itself: the broker away, a topic gone) and when it consumes again (joined its group, a round went
   * through). Liveness counts the time between the two (CONSUMER_DEAD_AFTER_MS).
   */
  onRunning?(running: boolean, cause?: unknown): void;
}

export interface Subscription {
  /** Finishes the batch in hand, commits it, leaves the group. */
  stop(): Promise<void>;
  /**
   * Resolves, with the cause, once the consumer has died for good: the client gave up on it (kafkajs' crash
   * without restart, an expulsion from the group, a fenced member) and it consumes nothing more. Never settles
   * for a consumer that runs until stop(). Whoever holds the subscription decides what follows (the runner's
   * supervisor recreates it; a rebuild gives up with the cause).
   */
  readonly failed: Promise<ConsumerFailedError>;
}

/** A consumer died for good (see Subscription.failed); `reason` is a short label for metrics. */
export class ConsumerFailedError extends Error {
  constructor(
    readonly groupId: string,
    readonly reason: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ConsumerFailedError';
  }
}

export interface TopicSpec {
  topic: string;
  partitions: number;
  /**
   * Topic-level settings, by their Kafka names (`retention.ms`, `retention.bytes`). The Postgres log knows
   * only those two, and refuses a finite `retention.bytes`.
   */
  config?: Record<string, string>;
}

/** One setting of one topic that alignTopicConfigs changed. */
export interface ConfigChange {
  topic: string;
  name: string;
  /** The value in effect before: the topic's own, or the broker's default when `inherited`. */
  from: string | null;
  inherited: boolean;
  to: string;
}

/** Where one partition's log starts and ends. */
export interface PartitionOffsets {
  partition: number;
  /** The first offset still in the log (above 0 once records were deleted, by retention or by hand). */
  low: string;
  /** The offset the next record will take: the log end. */
  high: string;
}

/** Which records `read` returns. */
export interface ReadOptions {
  /** Only this partition. Default: every partition of the topic. */
  partition?: number;
  /** With `partition`: the first offset to return. Default: the first record the log still holds. */
  fromOffset?: string;
  /** At most this many records per partition, the first ones. Default: no limit. */
  limit?: number;
}

export interface Bus {
  /** Where the log is, in an operator's words: `Kafka at <brokers>`, `the Postgres log`. */
  readonly description: string;
  /** `messaging.system` of its spans (OpenTelemetry's messaging conventions; the Postgres log is no listed system). */
  readonly messagingSystem: string;
  /**
   * The log is Shopstream's own storage (the Postgres log), so a process gives its topics their roles' settings
   * when it starts (an embedded install never runs `topics ensure`). False for a Kafka cluster: its topics are
   * the operator's, changed only by `pnpm cli topics ensure`; a process only warns.
   */
  readonly selfManaged: boolean;
  /** Creates the topics that do not exist yet; existing ones are left as they are. */
  ensureTopics(specs: TopicSpec[]): Promise<void>;
  /**
   * Gives existing topics the `config` of their spec, as their own settings (not inherited from a broker
   * default that may change), and leaves every other setting as it was. Resolves once the changes read back;
   * returns what changed. Topics that do not exist are skipped (ensureTopics creates them).
   */
  alignTopicConfigs(specs: TopicSpec[]): Promise<ConfigChange[]>;
  /** The settings in effect for each named topic, by Kafka name; at least `retention.ms` and `retention.bytes`. */
  topicConfigs(topics: string[]): Promise<Record<string, Record<string, string>>>;
  /**
   * Resolves once the log durably holds every record (Kafka: acks from all in-sync replicas).
   * Rejects with BusUnavailableError when it cannot take them; then none is reported written. Callers never
   * split by size: an adapter with a size limit does (splitForSend), one budget for every caller (topicLimits).
   */
  publish(topic: string, records: OutgoingRecord[], opts?: PublishOptions): Promise<void>;
  consume(opts: ConsumeOptions): Promise<Subscription>;
  /** Per partition of the group's topics: the log end and the committed position. */
  lag(groupId: string, topics: string[]): Promise<{ topic: string; partition: number; lag: number }[]>;
  /** Per partition of the topic, in partition order: the first offset still held and the log end. */
  offsets(topic: string): Promise<PartitionOffsets[]>;
  /**
   * The records of a topic up to each partition's log end as it stood when called (a record published
   * meanwhile is not returned), in partition order, then offset order. No consumer group keeps a position
   * afterwards: for a command that looks at a topic, such as `pnpm cli dlq list`.
   */
  read(topic: string, opts?: ReadOptions): Promise<BusRecord[]>;
  /** Forgets a consumer group's committed positions (a finished rebuild's group). No error when it does not exist. */
  deleteGroup(groupId: string): Promise<void>;
  /** True when the log answers now. */
  ping(): Promise<boolean>;
  close(): Promise<void>;
}

/** Options of one publish. */
export interface PublishOptions {
  /**
   * Asked when the records are taken to be written (Kafka: when the producer's micro-batch takes them for a send;
   * the Postgres log: before its append), not when publish is called: true leaves them unwritten, and the publish
   * rejects with PublishAbandonedError. For a caller whose own caller is gone (ingest: the HTTP client closed its
   * connection while its request waited). A publish the adapter splits in parts asks before its first part only.
   */
  abandoned?: () => boolean;
}

/** A publish whose `abandoned` said true when its records were taken to be written: none of them was written. */
export class PublishAbandonedError extends Error {
  constructor() {
    super('the publish was abandoned before its records were written');
    this.name = 'PublishAbandonedError';
  }
}

/** The log cannot take or serve records right now; the caller may retry later. */
export class BusUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'BusUnavailableError';
  }
}

/**
 * The log refused a publish as larger than a topic takes (Kafka: MESSAGE_TOO_LARGE, a partition's records
 * above the topic's max.message.bytes). The partition that refused wrote none of its records; other partitions of
 * the same send may have written theirs, as with any failed publish. Smaller publishes of the same records may go
 * through: a caller that may split them (an outbox relay, at least once) publishes fewer at a time. A
 * BusUnavailableError, so callers that cannot split answer as they do for any refused publish (ingest: 503).
 */
export class RecordsTooLargeError extends BusUnavailableError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'RecordsTooLargeError';
  }
}
