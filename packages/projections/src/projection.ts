import type { z } from 'zod';
import { isDataError, queryRow, sql, type Db, type Queryable } from '@shopstream/db';
import { dlq, headers as H, unstorableText, type TopicDefinition } from '@shopstream/contracts';
import { counter, gauge, histogram, tracingEnabled, TRACEPARENT, type Logger } from '@shopstream/telemetry';
import {
  type Batch,
  type BatchContext,
  type Bus,
  type BusRecord,
  type OutgoingRecord,
  topicOf,
  type TopicNames,
  superviseConsumer,
  traceBatch,
  type BatchTrace,
} from '@shopstream/bus';
import { appendMarked, appendToOutbox, HeldRecords, startOutboxRelay, type EmittedRecord, type HoldMarked, type OutboxRelay } from './outbox.js';
import { gather } from './gather.js';

const handled = counter('shopstream_consumer_records_total', 'Records handled by a consumer group, by outcome.', ['group', 'topic', 'outcome']);
const deadLetters = counter('shopstream_dead_letters_total', 'Records sent to a dead-letter topic, by source topic.', ['group', 'topic']);
const behind = counter(
  'shopstream_projection_checkpoint_behind_total',
  "Times a projection found a partition's checkpoint in PostgreSQL behind the log's committed position when the partition was assigned to it, or behind where it had itself moved the checkpoint (PostgreSQL lost committed work: restored from a backup, a failover to a replica that lagged), by outcome: rewound (delivered again from the checkpoint), gone (the records between were no longer in the log).",
  ['group', 'topic', 'outcome'],
);
const batchSeconds = histogram('shopstream_consumer_batch_seconds', 'Time to handle one batch, commit included.', ['group', 'topic']);
const groupSizes = histogram(
  'shopstream_projection_transaction_batches',
  "Partitions' batches applied per transaction by a live projection (several when a fetch brought records of many partitions).",
  ['group', 'topic'],
  [1, 2, 3, 4, 6, 8, 12, 16, 24, 32],
);
/** A live projection's transactions at once, and the bytes of records past which it merges no more batches into one. */
export const GROUP_MAX_IN_FLIGHT = 3;
export const GROUP_MAX_BYTES = 1024 * 1024;
/** The partitions a live projection's consumer hands over at once (ConsumeOptions.partitionsAtOnce): in effect all. */
const LIVE_PARTITIONS_AT_ONCE = 256;
/** How often a live projection reads its lag into shopstream_consumer_lag, unless told otherwise (lagIntervalMs). */
export const LAG_INTERVAL_MS = 5_000;
const lagGauge = gauge('shopstream_consumer_lag', 'Records in the log not yet committed by the group, per partition.', ['group', 'topic', 'partition']);

export interface ValidRecord<T> {
  record: BusRecord;
  value: T;
}

/** What a projection's logic is opened with, in the live service and in a rebuild alike. */
export interface ProjectionDeps {
  db: Db;
  logger: Logger;
  topics: TopicNames;
  /** The process's master key settings, for projections that open sealed records (docs/privacy.md); unset: process.env. */
  env?: MasterKeySettings;
}

/** Where the master keys of sealed records come from (see @shopstream/privacy's keyring). */
export interface MasterKeySettings {
  PRIVACY_MASTER_KEY?: string;
  PRIVACY_MASTER_KEY_FILE?: string;
}

/** A projection's logic, opened once per process (it may hold state, such as the flow matcher's index). */
export interface ProjectionLogic<T> {
  /**
   * Applies records not applied yet, in the runner's transaction, and returns what they emit. Every value it
   * writes comes from the records (never the clock), so a rebuild writes the same rows. In a rebuild the
   * unqualified table names resolve to the new generation's tables, and what it emits goes out only when the
   * live run never emitted it: each emitted record's value carries the `shop_id` and `id` of the row it
   * announces in the projection's first table (a metric event's id is its activity's, a trigger's its row's).
   */
  apply(tx: Queryable, records: ValidRecord<T>[]): Promise<EmittedRecord[]>;
  /**
   * Rebuilds emitted records from the projection's tables by the refs apply gave them (EmittedRecord.ref), in
   * their order, leaving out those whose rows are gone (an erasure): for a crash between a live batch's commit
   * and its relay, which leaves only the batch's mark row in the outbox (appendMarked). A projection without it
   * (or a record without a ref) puts its records in the outbox whole.
   */
  recover?(q: Queryable, refs: string[]): Promise<OutgoingRecord[]>;
  /** Runs before a batch's transaction: e.g. bring in-memory state up to the records' time. */
  prepare?(records: ValidRecord<T>[]): Promise<void>;
  readiness?: Record<string, () => Promise<boolean>>;
  close?(): Promise<void>;
}

/**
 * A projection declared once (as Emmett's projections are): its name (also its consumer group's, after
 * CONSUMER_GROUP_PREFIX), the topic it reads and the schema of its records, the tables it owns (rebuilt
 * together), the topics it emits to, and its logic. The runner composes the stages: decode and dead-letter,
 * idempotent apply with its checkpoint, emit through the outbox.
 */
export interface ProjectionDefinition<T> {
  name: string;
  /** Bumped when the rows it writes change for the same records: a rebuild then brings old rows in line. */
  version: number;
  summary: string;
  source(topics: TopicNames): string;
  /** Topics it emits to, each with its unprefixed name (see RelayOptions.legacyName). */
  emits(topics: TopicNames): { topic: string; name: string }[];
  schema: z.ZodType<T>;
  /** Its tables in the public schema, in the order its apply writes them. */
  tables: readonly string[];
  open(deps: ProjectionDeps): Promise<ProjectionLogic<T>>;
}

/** What a projection declares: the topic definitions it reads and emits to, instead of names and a schema. */
export interface ProjectionDeclaration<T> extends Omit<ProjectionDefinition<T>, 'source' | 'emits' | 'schema'> {
  /** The topic it reads: its records are decoded with the topic's schema. */
  topic: TopicDefinition<T>;
  /** The topics it emits to. */
  emits: readonly TopicDefinition<unknown>[];
}

export const defineProjection = <T>({ topic, emits, ...d }: ProjectionDeclaration<T>): ProjectionDefinition<T> => ({
  ...d,
  source: (t) => topicOf(t, topic),
  emits: (t) => emits.map((e) => ({ topic: topicOf(t, e), name: e.name })),
  schema: topic.schema,
});

/** Why a record is not one the schema accepts, or null when it is. */
function parseRecord<T>(schema: z.ZodType<T>, r: BusRecord): { ok: true; value: T } | { ok: false; reason: string } {
  let json: unknown;
  const text = r.value.toString('utf8');
  try {
    json = JSON.parse(text);
  } catch (e) {
    return { ok: false, reason: `invalid JSON: ${(e as Error).message}` };
  }
  // Before the schema: zod would turn a `__proto__` key into a prototype; NUL or an unpaired surrogate
  // would pass it and then fail every insert of the batch, blocking the partition. Valid JSON decoded from
  // UTF-8 bytes carries either only as a \u escape (raw control characters are invalid JSON; invalid UTF-8
  // decodes to U+FFFD), and `__proto__` only spelled out or with escapes: a record with neither needs no walk.
  const unstorable = (text.includes('\\u') || text.includes('__proto__')) && unstorableText(json);
  if (unstorable) return { ok: false, reason: `unstorable: ${unstorable.path || '(value)'}: ${unstorable.message}` };
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    const first = parsed.error.issues.slice(0, 5).map((i) => `${i.path.join('.') || '(value)'}: ${i.message}`);
    return { ok: false, reason: `schema: ${first.join('; ')}` };
  }
  return { ok: true, value: parsed.data };
}

export interface Rejected {
  record: BusRecord;
  reason: string;
}

/** How the runner treats a batch: the live projection and a rebuild differ only in these. */
export interface ApplyMode {
  /** The key of this run's checkpoint rows in projection_offsets. */
  checkpointGroup: string;
  /** Set in a rebuild: the schema whose tables the unqualified names resolve to. */
  searchPath?: string;
  /**
   * Whether emitted records go to the outbox. In a rebuild the outbox the name resolves to is the new
   * generation's own (searchPath), which the switch empties into the live one.
   */
  emit: boolean;
  /**
   * Set in a rebuild: keeps only the emitted records the live run never emitted (a record it dead-lettered
   * and the rebuild applied), so a rebuild emits nothing twice.
   */
  unemitted?(tx: Queryable, emitted: EmittedRecord[]): Promise<EmittedRecord[]>;
  /**
   * Set in the live run of a projection that can recover its records: a batch's emitted records go to the
   * outbox as one mark row per topic (`mark`: the projection's name), and their topic's relay in this process
   * publishes them from memory (appendMarked).
   */
  marks?: { name: string; hold: HoldMarked };
  /** What becomes of records that cannot be applied: live sends them to the dead-letter topic. */
  reject(rejected: Rejected[]): Promise<void>;
  /** `messaging.system` of the bus the records come from, for the consumer spans (tracing on). */
  messagingSystem?: string;
}

/**
 * The checkpoint of a batch's partition, read in its transaction, is behind where this process last moved it:
 * PostgreSQL lost work it had committed (a failover to a replica that lagged, a restore from a backup) while the
 * consumer kept its place in the log. The transaction is rolled back, and the runner delivers the partition again
 * from the checkpoint.
 */
export class CheckpointLost extends Error {
  constructor(
    readonly partition: number,
    readonly checkpoint: bigint,
    readonly expected: bigint,
  ) {
    super(`the checkpoint of partition ${partition} is at ${checkpoint}, behind ${expected} where this process committed it: PostgreSQL lost committed work`);
    this.name = 'CheckpointLost';
  }
}

/**
 * The emitted records with the `traceparent` that continues their cause's trace: its span's when tracing is
 * on, else the cause's own header as it came (a process without tracing passes the context on unchanged).
 */
function withTraceContext(emitted: EmittedRecord[], trace: BatchTrace | undefined): EmittedRecord[] {
  return emitted.map((e) => {
    if (!e.cause) return e;
    const traceparent = trace ? trace.traceparentFor(e.cause) : e.cause.headers[TRACEPARENT];
    return traceparent === undefined ? e : { ...e, headers: { ...e.headers, [TRACEPARENT]: traceparent } };
  });
}

/** What applyBatch did with a batch: records applied, skipped as applied already, rejected; records it put in the outbox. */
export interface BatchOutcome {
  applied: number;
  duplicates: number;
  rejected: number;
  emitted: number;
}

/** A batch's records that the schema accepts, and the rest with the reason. */
export interface ParsedBatch<T> {
  valid: ValidRecord<T>[];
  bad: Rejected[];
}

/** Parses each record of the batch with the projection's schema. */
function parseBatch<T>(def: Pick<ProjectionDefinition<T>, 'schema'>, batch: Batch): ParsedBatch<T> {
  const valid: ValidRecord<T>[] = [];
  const bad: Rejected[] = [];
  for (const record of batch.records) {
    const p = parseRecord(def.schema, record);
    if (p.ok) valid.push({ record, value: p.value });
    else bad.push({ record, reason: p.reason });
  }
  return { valid, bad };
}

/**
 * Applies one batch of one partition: valid records not applied yet, in one transaction that also moves the
 * checkpoint (compare-and-set), so a record delivered twice is applied once. Records that fail the schema,
 * or that the database refuses for their data, are rejected and never block the partition. Returns how many
 * records were applied and how many were skipped as already applied.
 */
export async function applyBatch<T>(
  def: ProjectionDefinition<T>,
  logic: ProjectionLogic<T>,
  db: Db,
  mode: ApplyMode,
  batch: Batch,
  log: Logger,
  expectedFrom?: bigint,
  /** The batch parsed already, its bad records rejected already (a batch applied again after CheckpointLost). */
  parsed?: ParsedBatch<T>,
): Promise<BatchOutcome> {
  const { valid, bad } = parsed ?? parseBatch(def, batch);
  if (!parsed) await mode.reject(bad);
  const trace =
    tracingEnabled() && valid.length > 0
      ? traceBatch(
          batch.topic,
          mode.checkpointGroup,
          mode.messagingSystem,
          valid.map((v) => v.record),
        )
      : undefined;
  try {
    const r = await (trace
      ? trace.run(() => applyValid(def, logic, db, mode, batch, valid, log, trace, expectedFrom))
      : applyValid(def, logic, db, mode, batch, valid, log, trace, expectedFrom));
    trace?.end();
    return { ...r, rejected: r.rejected + bad.length };
  } catch (e) {
    trace?.end(e);
    throw e;
  }
}

/**
 * The checkpoint of the batch's partition, locked for this transaction, as it was (-1 when it has none), and moved
 * to `next` (never back): one statement, where a read before the batch and a write after it were two round trips
 * of every batch. Moved before the records are applied, in the same transaction, so it commits with them or not
 * at all. A transaction of another process on the same partition waits on the lock and then reads what this one
 * committed (FOR UPDATE reads the newest version after the wait). The upsert takes `prev` as its input, so the row
 * is read before it is moved.
 */
export async function moveCheckpoint(tx: Queryable, group: string, batch: Pick<Batch, 'topic' | 'partition'>, next: bigint): Promise<bigint> {
  const was = await queryRow(
    tx,
    sql`
      WITH prev AS (
        SELECT next_offset FROM projection_offsets WHERE group_id = ${group} AND topic = ${batch.topic} AND partition = ${batch.partition} FOR UPDATE
      ), moved AS (
        INSERT INTO projection_offsets (group_id, topic, partition, next_offset, updated_at)
        SELECT ${group}, ${batch.topic}, ${batch.partition}, ${next.toString()}, now() FROM (SELECT count(*) FROM prev) AS after_prev
        ON CONFLICT (group_id, topic, partition)
        DO UPDATE SET next_offset = GREATEST(projection_offsets.next_offset, EXCLUDED.next_offset), updated_at = now()
      )
      SELECT (SELECT next_offset FROM prev) AS next_offset`,
    (r) => (r.next_offset === null ? null : BigInt(r.next_offset as string)),
  );
  return was ?? -1n;
}

/**
 * moveCheckpoint for several partitions of one topic in one statement: the checkpoints as they were (-1 for a
 * partition without one), by partition. The rows are locked in partition order, so two transactions that move
 * overlapping partitions (two processes during a rebalance) wait on each other instead of deadlocking.
 */
export async function moveCheckpoints(tx: Queryable, group: string, topic: string, moves: { partition: number; next: bigint }[]): Promise<Map<number, bigint>> {
  const sorted = [...moves].sort((a, b) => a.partition - b.partition);
  const rows = await tx.query(sql`
    WITH prev AS (
      SELECT partition, next_offset FROM projection_offsets
      WHERE group_id = ${group} AND topic = ${topic} AND partition = ANY(${sorted.map((m) => m.partition)}::int[])
      ORDER BY partition FOR UPDATE
    ), moved AS (
      INSERT INTO projection_offsets (group_id, topic, partition, next_offset, updated_at)
      SELECT ${group}, ${topic}, m.partition, m.next_offset, now()
      FROM unnest(${sorted.map((m) => m.partition)}::int[], ${sorted.map((m) => m.next.toString())}::bigint[]) AS m(partition, next_offset),
        (SELECT count(*) FROM prev) AS after_prev
      ORDER BY m.partition
      ON CONFLICT (group_id, topic, partition)
      DO UPDATE SET next_offset = GREATEST(projection_offsets.next_offset, EXCLUDED.next_offset), updated_at = now()
    )
    SELECT partition, next_offset FROM prev`);
  const was = new Map<number, bigint>(sorted.map((m) => [m.partition, -1n]));
  for (const r of rows) was.set(Number(r.partition), BigInt(r.next_offset as string));
  return was;
}

/** In a rebuild, the transaction's unqualified table names resolve to the new generation's tables (ApplyMode.searchPath). */
async function useSearchPath(tx: Queryable, mode: ApplyMode): Promise<void> {
  if (mode.searchPath) await tx.query(sql`SET LOCAL search_path TO ${sql.ident(mode.searchPath)}, public`);
}

/**
 * Applies records not applied yet in the caller's transaction and appends what they emit to the outbox (when the
 * mode emits): how many records went to the outbox.
 */
async function applyFresh<T>(
  tx: Queryable,
  logic: ProjectionLogic<T>,
  mode: ApplyMode,
  fresh: ValidRecord<T>[],
  trace: BatchTrace | undefined,
): Promise<number> {
  if (fresh.length === 0) return 0;
  const emitted = withTraceContext(await logic.apply(tx, fresh), trace);
  if (!mode.emit) return 0;
  const out = mode.unemitted && emitted.length > 0 ? await mode.unemitted(tx, emitted) : emitted;
  await (mode.marks ? appendMarked(tx, out, mode.marks.name, mode.marks.hold) : appendToOutbox(tx, out));
  return out.length;
}

/** One partition's batch in a transaction of several (applyGroup): its valid records, and where this process last moved its checkpoint. */
export interface GroupItem<T> {
  batch: Batch;
  valid: ValidRecord<T>[];
  expectedFrom?: bigint;
}

/**
 * Applies the valid records of batches of different partitions of one topic in one transaction: one checkpoint
 * statement for all (moveCheckpoints), one apply of the records not applied yet (each shop's records are in one
 * partition, so their order holds), one outbox append. At a moderate rate a fetch brings a few records for each of
 * many partitions, and a transaction each cost a dozen round trips per handful of records. Returns each batch's
 * outcome, in `items`' order; the records emitted are counted in the last one's. Throws CheckpointLost (for the
 * first partition found behind) or the database's error and applies nothing: the caller then applies each batch
 * on its own (applyValid), which handles both.
 */
export async function applyGroup<T>(logic: ProjectionLogic<T>, db: Db, mode: ApplyMode, items: GroupItem<T>[]): Promise<BatchOutcome[]> {
  const all = items.flatMap((i) => i.valid);
  if (logic.prepare && all.length > 0) await logic.prepare(all);
  const topic = items[0].batch.topic;
  return db.tx(async (tx) => {
    await useSearchPath(tx, mode);
    const moves = items.map((i) => ({ partition: i.batch.partition, next: BigInt(i.batch.records[i.batch.records.length - 1].offset) + 1n }));
    const from = await moveCheckpoints(tx, mode.checkpointGroup, topic, moves);
    const fresh: ValidRecord<T>[] = [];
    const outcomes = items.map((i): BatchOutcome => {
      const at = from.get(i.batch.partition) ?? -1n;
      if (i.expectedFrom !== undefined && at < i.expectedFrom) throw new CheckpointLost(i.batch.partition, at, i.expectedFrom);
      const f = i.valid.filter((v) => BigInt(v.record.offset) >= at);
      for (const v of f) fresh.push(v);
      return { applied: f.length, duplicates: i.valid.length - f.length, rejected: 0, emitted: 0 };
    });
    outcomes[outcomes.length - 1].emitted = await applyFresh(tx, logic, mode, fresh, undefined);
    return outcomes;
  });
}

/**
 * The projection's checkpoint of the batch's partition: the next offset to apply, or null when it has none. A
 * partition assigned to a member resumes at the group's committed position in the log, committed after the
 * checkpoint's transaction: the two agree, or the checkpoint is ahead (a crash between the two commits; the records
 * are skipped as applied). A checkpoint behind the log's position means PostgreSQL lost work the group had
 * committed (restored from a backup, a failover to a replica that lagged): the records between were never applied,
 * and resuming at the log's position would skip them for good (see runLiveProjection).
 */
export const checkpointOf = (q: Queryable, group: string, batch: Pick<Batch, 'topic' | 'partition'>): Promise<bigint | null> =>
  queryRow(q, sql`SELECT next_offset FROM projection_offsets WHERE group_id = ${group} AND topic = ${batch.topic} AND partition = ${batch.partition}`, (r) =>
    BigInt(r.next_offset as string),
  );

/** applyBatch for the valid records of the batch (their rejected ones already sent on). */
export async function applyValid<T>(
  def: ProjectionDefinition<T>,
  logic: ProjectionLogic<T>,
  db: Db,
  mode: ApplyMode,
  batch: Batch,
  valid: ValidRecord<T>[],
  log: Logger,
  trace: BatchTrace | undefined,
  expectedFrom: bigint | undefined,
): Promise<BatchOutcome> {
  if (logic.prepare && valid.length > 0) await logic.prepare(valid);

  /**
   * Applies the records not applied yet and moves the checkpoint to next, in one transaction. With `expected` (where
   * this process last moved the checkpoint), a checkpoint found behind it rolls the transaction back (CheckpointLost).
   */
  const commit = (records: ValidRecord<T>[], next: bigint, expected?: bigint) =>
    db.tx(async (tx) => {
      await useSearchPath(tx, mode);
      const from = await moveCheckpoint(tx, mode.checkpointGroup, batch, next);
      if (expected !== undefined && from < expected) throw new CheckpointLost(batch.partition, from, expected);
      const fresh = records.filter((v) => BigInt(v.record.offset) >= from);
      return { applied: fresh.length, emitted: await applyFresh(tx, logic, mode, fresh, trace) };
    });

  const lastOffset = BigInt(batch.records[batch.records.length - 1].offset);
  let applied = 0;
  let emitted = 0;
  let refused = 0;
  const add = (r: { applied: number; emitted: number }) => {
    applied += r.applied;
    emitted += r.emitted;
  };
  try {
    add(await commit(valid, lastOffset + 1n, expectedFrom));
  } catch (e) {
    if (!isDataError(e)) throw e;
    // The database refuses something in this batch that no retry will change (bad data, a violated
    // constraint). One record must not block the partition: apply them one by one, and reject each one it
    // refuses, moving the position past it. Other errors (connection, timeout) redeliver the batch.
    log.warn({ err: e, partition: batch.partition }, 'the database refused a batch: applying its records one by one');
    for (const v of valid) {
      const next = BigInt(v.record.offset) + 1n;
      try {
        add(await commit([v], next));
      } catch (e2) {
        if (!isDataError(e2)) throw e2;
        await mode.reject([{ record: v.record, reason: `refused by the database: ${(e2 as Error).message}` }]);
        await commit([], next);
        refused++;
      }
    }
    await commit([], lastOffset + 1n);
  }
  return { applied, duplicates: valid.length - applied - refused, rejected: refused, emitted };
}

/** Sends records to `<topic>.dlq` with the reason and their origin in headers. */
export async function sendToDeadLetters(bus: Bus, topic: string, rejected: Rejected[]): Promise<void> {
  if (rejected.length === 0) return;
  await bus.publish(
    dlq(topic),
    rejected.map(({ record, reason }) => ({
      key: record.key ?? '',
      value: record.value,
      headers: {
        ...record.headers,
        // The reason may quote the record (a JSON.parse message does): made storable for any header store.
        [H.dlqReason]: reason
          .slice(0, 1000)
          .replace(/\u0000/g, '\\u0000')
          .toWellFormed(),
        [H.dlqSourceTopic]: record.topic,
        [H.dlqSourcePartition]: String(record.partition),
        [H.dlqSourceOffset]: record.offset,
      },
    })),
  );
}

export interface LiveProjectionOptions {
  bus: Bus;
  db: Db;
  logger: Logger;
  topics: TopicNames;
  /** CONSUMER_GROUP_PREFIX: the group id is the prefix and the projection's name. */
  groupPrefix: string;
  /** The process's master key settings (ProjectionDeps.env). */
  env?: MasterKeySettings;
  /** How often consumer lag is read into the shopstream_consumer_lag gauge (LAG_INTERVAL_MS). 0 turns it off. */
  lagIntervalMs?: number;
  /** How often the outbox relay runs without being kicked (records a crash left behind). */
  relayIntervalMs?: number;
}

export interface Projection {
  /** Records applied since start: for readiness and tests. */
  readonly applied: number;
  readonly readiness: Record<string, () => Promise<boolean>>;
  /** Finishes the batch in hand, relays what it emitted, leaves the group. */
  stop(): Promise<void>;
}

/** The consumer group (and checkpoint key) of a projection's live run. */
export const liveGroupId = (groupPrefix: string, def: Pick<ProjectionDefinition<unknown>, 'name'>): string => `${groupPrefix}${def.name}`;

/**
 * Runs a projection live: records that fail the schema, or that the database refuses for their data, go to
 * `<topic>.dlq` with the reason in a header; the rest are applied in one transaction per batch with the
 * projection's checkpoint; what they emit is appended to the outbox in that transaction (a projection with
 * `recover`: one mark row per topic, its records relayed from this process's memory) and relayed to its topic
 * after the commit (each commit kicks the relay; a timer covers rows a crash left behind, a mark row's records
 * rebuilt by `recover`; stop relays once more). The log's group position is committed after the transaction.
 */
export async function runLiveProjection<T>(def: ProjectionDefinition<T>, o: LiveProjectionOptions): Promise<Projection> {
  const groupId = liveGroupId(o.groupPrefix, def);
  const topic = def.source(o.topics);
  const log = o.logger.child({ group: groupId, topic });
  const logic = await def.open({ db: o.db, logger: log, topics: o.topics, env: o.env });
  const held = new Map<string, HeldRecords>();
  const relays: OutboxRelay[] = def.emits(o.topics).map((e) => {
    const records = new HeldRecords();
    held.set(e.topic, records);
    return startOutboxRelay({
      db: o.db,
      bus: o.bus,
      logger: log,
      topic: e.topic,
      legacyName: e.name,
      intervalMs: o.relayIntervalMs ?? 1_000,
      held: records,
      ...(logic.recover ? { recover: { [def.name]: logic.recover.bind(logic) } } : {}),
    });
  });
  const relayAll = (what: string) =>
    Promise.all(relays.map((r) => r.relay().catch((e) => log.warn({ err: e }, `${what} outbox relay failed; the timer retries`))));
  await relayAll('initial');

  const mode: ApplyMode = {
    checkpointGroup: groupId,
    messagingSystem: o.bus.messagingSystem,
    emit: true,
    ...(logic.recover ? { marks: { name: def.name, hold: (t: string, seq: string, records: OutgoingRecord[]) => held.get(t)?.hold(seq, records) } } : {}),
    async reject(rejected) {
      if (rejected.length === 0) return;
      await sendToDeadLetters(o.bus, topic, rejected);
      deadLetters.inc({ group: groupId, topic }, rejected.length);
      for (const d of rejected) log.warn({ partition: d.record.partition, offset: d.record.offset, reason: d.reason }, 'record sent to dead-letter topic');
    },
  };
  let applied = 0;
  /**
   * By partition: where this process last moved the checkpoint, since the partition was assigned to it. A batch that
   * finds the checkpoint behind it (CheckpointLost) is delivered again from the checkpoint: without this, the records
   * between would be skipped for good, as the consumer's place in the log is past them.
   */
  const movedTo = new Map<number, bigint>();
  /** By partition: the checkpoint whose gone records were reported (each is reported once). */
  const reportedGone = new Map<number, bigint>();
  /**
   * For the first batch of a partition assigned here: true, after asking the bus to deliver the partition again
   * from there, when the log holds records between the checkpoint and the batch. Offsets between that hold no
   * record (a transaction marker of another producer) ask for nothing; records retention removed are reported.
   */
  const resumesBehind = async (batch: Batch, ctx: BatchContext): Promise<boolean> => {
    const at = await checkpointOf(o.db, mode.checkpointGroup, batch);
    const first = BigInt(batch.records[0].offset);
    if ((at ?? 0n) >= first) return false;
    const low = BigInt((await o.bus.offsets(topic)).find((p) => p.partition === batch.partition)?.low ?? '0');
    if (at !== null && at < low && reportedGone.get(batch.partition) !== at) {
      reportedGone.set(batch.partition, at);
      behind.inc({ group: groupId, topic, outcome: 'gone' });
      log.error(
        { partition: batch.partition, checkpoint: String(at), logStart: String(low) },
        "the projection's checkpoint is behind the first record the log still holds: the records between are gone from it (retention) and the projection goes on without them; rebuild it from a log that has them",
      );
    }
    const from = at !== null && at > low ? at : low;
    if (from >= first) return false;
    const [next] = await o.bus.read(topic, { partition: batch.partition, fromOffset: String(from), limit: 1 });
    if (!next || BigInt(next.offset) >= first) return false;
    behind.inc({ group: groupId, topic, outcome: 'rewound' });
    log.warn(
      { partition: batch.partition, checkpoint: at === null ? null : String(at), committed: batch.records[0].offset },
      "the projection's checkpoint is behind the log's committed position (PostgreSQL lost committed work: restored from a backup, failed over?): the partition is delivered again from the checkpoint",
    );
    ctx.rewind(next.offset);
    return true;
  };
  /**
   * The batches of different partitions handed over together go in one transaction (applyGroup): at most
   * GROUP_MAX_IN_FLIGHT transactions at once, as many as the partitions the consumers used to handle at once, and
   * batches merged only up to GROUP_MAX_BYTES, so a backlog's full batches still run side by side. A group whose
   * transaction fails (a checkpoint found behind, a record the database refuses, a lost connection) applies each
   * of its batches on its own, which handles each case as a lone batch does. With tracing on each batch keeps its
   * own transaction and span.
   */
  const groups = gather<GroupItem<T>, BatchOutcome>({
    maxInFlight: GROUP_MAX_IN_FLIGHT,
    maxWeight: GROUP_MAX_BYTES,
    weight: (i) => i.batch.records.reduce((n, r) => n + r.value.length, 0),
    async run(items, done) {
      const alone = (i: GroupItem<T>) => applyValid(def, logic, o.db, mode, i.batch, i.valid, log, undefined, i.expectedFrom);
      if (items.length > 1) {
        try {
          const outcomes = await applyGroup(logic, o.db, mode, items);
          groupSizes.observe({ group: groupId, topic }, items.length);
          outcomes.forEach((r, k) => done(k, Promise.resolve(r)));
          return;
        } catch (e) {
          log.debug({ err: e, partitions: items.map((i) => i.batch.partition) }, 'a transaction of several batches failed: applying each on its own');
        }
      } else groupSizes.observe({ group: groupId, topic }, 1);
      // One at a time: the group's transactions never outnumber GROUP_MAX_IN_FLIGHT.
      for (const [k, i] of items.entries()) {
        const r = alone(i);
        done(k, r);
        await r.catch(() => {});
      }
    },
  });
  /** applyBatch for a batch parsed (its bad records rejected) already, through a group when tracing is off. */
  const applyGathered = async (batch: Batch, parsed: ParsedBatch<T>, expectedFrom: bigint | undefined): Promise<BatchOutcome> => {
    if (tracingEnabled()) return applyBatch(def, logic, o.db, mode, batch, log, expectedFrom, parsed);
    const r = await groups.submit({ batch, valid: parsed.valid, expectedFrom });
    return { ...r, rejected: r.rejected + parsed.bad.length };
  };
  const sub = await superviseConsumer(
    o.bus,
    {
      groupId,
      topics: [topic],
      fromBeginning: true,
      // Every partition at once: the groups above bound the transactions.
      partitionsAtOnce: LIVE_PARTITIONS_AT_ONCE,
      handleBatch: async (batch, ctx) => {
        // The first batch of a partition assigned here starts at the log's committed position: when the checkpoint
        // is behind it (checkpointOf) and the log still holds records between, they are delivered again first.
        if (ctx.resumed) {
          movedTo.delete(batch.partition);
          if (await resumesBehind(batch, ctx)) return;
        }
        const end = batchSeconds.startTimer({ group: groupId, topic });
        // Parsed, and its bad records sent to the dead letters, once: the batch applied again below sends none twice.
        const parsed = parseBatch(def, batch);
        await mode.reject(parsed.bad);
        let r;
        try {
          r = await applyGathered(batch, parsed, movedTo.get(batch.partition));
        } catch (e) {
          if (!(e instanceof CheckpointLost)) throw e;
          // PostgreSQL lost batches this process had committed (their records are past the consumer's place in the
          // log): from the checkpoint again when the log still holds records between, else on from here.
          movedTo.delete(batch.partition);
          if (await resumesBehind(batch, ctx)) return;
          r = await applyBatch(def, logic, o.db, mode, batch, log, undefined, parsed);
        }
        movedTo.set(batch.partition, BigInt(batch.records[batch.records.length - 1].offset) + 1n);
        // Not awaited: the next batch's Postgres work overlaps this one's Kafka round trips; the records are
        // committed in the outbox, so nothing waits on the relay to be safe. A batch that put nothing in the outbox
        // (a flow matcher's batch that matched no flow) kicks nothing: each run is a transaction, and rows of others
        // (a crash's) go out with the timer's next run.
        if (relays.length > 0 && r.emitted > 0) void relayAll('kicked');
        applied += r.applied;
        handled.inc({ group: groupId, topic, outcome: 'applied' }, r.applied);
        handled.inc({ group: groupId, topic, outcome: 'skipped_duplicate' }, r.duplicates);
        handled.inc({ group: groupId, topic, outcome: 'dead_letter' }, r.rejected);
        end();
      },
    },
    { logger: log },
  );

  const lagEvery = o.lagIntervalMs ?? LAG_INTERVAL_MS;
  const lastLag = new Map<string, number>();
  const timer =
    lagEvery > 0
      ? setInterval(() => {
          o.bus
            .lag(groupId, [topic])
            .then((rows) =>
              rows.forEach((r) => {
                // Idle, nothing moves: the gauge is set only when a partition's lag changed.
                const k = `${r.topic}/${r.partition}`;
                if (lastLag.get(k) === r.lag) return;
                lastLag.set(k, r.lag);
                lagGauge.set({ group: groupId, topic: r.topic, partition: String(r.partition) }, r.lag);
              }),
            )
            .catch((e) => log.debug({ err: e }, 'could not read consumer lag'));
        }, lagEvery)
      : null;
  timer?.unref();

  return {
    get applied() {
      return applied;
    },
    readiness: logic.readiness ?? {},
    async stop() {
      if (timer) clearInterval(timer);
      await sub.stop();
      await relayAll('final');
      await Promise.all(relays.map((r) => r.stop()));
      await logic.close?.();
    },
  };
}

/** Waits without blocking the group: heartbeats while it waits, ends early when the consumer stops. */
export async function pause(ms: number, ctx: BatchContext): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
  await ctx.heartbeat();
}
