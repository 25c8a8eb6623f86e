import type { z } from 'zod';
import { sql, type Db, type Queryable } from '@shopstream/db';
import { dlq, headers as H, unstorableText } from '@shopstream/contracts';
import { counter, gauge, histogram, type Logger } from '@shopstream/telemetry';
import type { Batch, Bus, BusRecord, Subscription } from './port.js';

const handled = counter('shopstream_consumer_records_total', 'Records handled by a consumer group, by outcome.', ['group', 'topic', 'outcome']);
const deadLetters = counter('shopstream_dead_letters_total', 'Records sent to a dead-letter topic, by source topic.', ['group', 'topic']);
const batchSeconds = histogram('shopstream_consumer_batch_seconds', 'Time to handle one batch, commit included.', ['group', 'topic']);
const lagGauge = gauge('shopstream_consumer_lag', 'Records in the log not yet committed by the group, per partition.', ['group', 'topic', 'partition']);

export interface ValidRecord<T> {
  record: BusRecord;
  value: T;
}

export interface ProjectionOptions<T> {
  bus: Bus;
  db: Db;
  logger: Logger;
  groupId: string;
  topic: string;
  schema: z.ZodType<T>;
  /** Applies the batch's valid, not yet applied records inside one transaction. */
  apply(tx: Queryable, records: ValidRecord<T>[], batch: Batch): Promise<void>;
  /** Runs after the transaction committed and before the position is committed (e.g. drain an outbox). */
  afterCommit?(): Promise<void>;
  /** How often consumer lag is read into the shopstream_consumer_lag gauge. 0 turns it off. */
  lagIntervalMs?: number;
}

export interface Projection extends Subscription {
  /** Records applied since start: for readiness and tests. */
  readonly applied: number;
}

/**
 * A Postgres error that retrying the same record cannot fix: data exceptions (class 22: out-of-range values,
 * bad encodings), integrity constraint violations (23) and limits such as an index row too large (54).
 */
function isDataError(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^(22|23|54)[0-9A-Z]{3}$/.test(code);
}

/** Why a record is not one the schema accepts, or null when it is. */
function parseRecord<T>(schema: z.ZodType<T>, r: BusRecord): { ok: true; value: T } | { ok: false; reason: string } {
  let json: unknown;
  try {
    json = JSON.parse(r.value.toString('utf8'));
  } catch (e) {
    return { ok: false, reason: `invalid JSON: ${(e as Error).message}` };
  }
  // Before the schema: zod would turn a `__proto__` key into a prototype; NUL or an unpaired surrogate
  // would pass it and then fail every insert of the batch, blocking the partition.
  const unstorable = unstorableText(json);
  if (unstorable) return { ok: false, reason: `unstorable: ${unstorable.path || '(value)'}: ${unstorable.message}` };
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    const first = parsed.error.issues.slice(0, 5).map((i) => `${i.path.join('.') || '(value)'}: ${i.message}`);
    return { ok: false, reason: `schema: ${first.join('; ')}` };
  }
  return { ok: true, value: parsed.data };
}

/**
 * Runs a projection: records that fail the schema, or that the database refuses for their data, go to
 * `<topic>.dlq` with the reason in a header and never block the partition; the rest are applied in one Postgres transaction per batch that also moves
 * the projection's own position in `projection_offsets` (compare-and-set), so a record delivered twice is
 * applied once. The log's group position is committed after that transaction.
 */
export async function runProjection<T>(o: ProjectionOptions<T>): Promise<Projection> {
  const log = o.logger.child({ group: o.groupId, topic: o.topic });
  let applied = 0;
  const sub = await o.bus.consume({
    groupId: o.groupId,
    topics: [o.topic],
    fromBeginning: true,
    handleBatch: async (batch) => {
      const end = batchSeconds.startTimer({ group: o.groupId, topic: o.topic });
      const valid: ValidRecord<T>[] = [];
      const dead: { record: BusRecord; reason: string }[] = [];
      for (const record of batch.records) {
        const p = parseRecord(o.schema, record);
        if (p.ok) valid.push({ record, value: p.value });
        else dead.push({ record, reason: p.reason });
      }
      await deadLetter(dead);

      /** Applies the records not applied yet and moves the projection's position to next, in one transaction. */
      const commit = (records: ValidRecord<T>[], next: bigint) =>
        o.db.tx(async (tx) => {
          const rows = await tx.query(
            sql`SELECT next_offset FROM projection_offsets WHERE group_id = ${o.groupId} AND topic = ${batch.topic} AND partition = ${batch.partition} FOR UPDATE`,
          );
          const from = rows.length > 0 ? BigInt(rows[0].next_offset) : -1n;
          const fresh = records.filter((v) => BigInt(v.record.offset) >= from);
          if (fresh.length > 0) await o.apply(tx, fresh, batch);
          await tx.query(sql`
            INSERT INTO projection_offsets (group_id, topic, partition, next_offset, updated_at)
            VALUES (${o.groupId}, ${batch.topic}, ${batch.partition}, ${next.toString()}, now())
            ON CONFLICT (group_id, topic, partition)
            DO UPDATE SET next_offset = GREATEST(projection_offsets.next_offset, EXCLUDED.next_offset), updated_at = now()`);
          return fresh.length;
        });

      const lastOffset = BigInt(batch.records[batch.records.length - 1].offset);
      let appliedNow = 0;
      let refused = 0;
      try {
        appliedNow = await commit(valid, lastOffset + 1n);
      } catch (e) {
        if (!isDataError(e)) throw e;
        // The database refuses something in this batch that no retry will change (bad data, a violated
        // constraint). One record must not block the partition: apply them one by one, and dead-letter each
        // one it refuses, moving the position past it. Other errors (connection, timeout) redeliver the batch.
        log.warn({ err: e, partition: batch.partition }, 'the database refused a batch: applying its records one by one');
        for (const v of valid) {
          const next = BigInt(v.record.offset) + 1n;
          try {
            appliedNow += await commit([v], next);
          } catch (e2) {
            if (!isDataError(e2)) throw e2;
            await deadLetter([{ record: v.record, reason: `refused by the database: ${(e2 as Error).message}` }]);
            await commit([], next);
            refused++;
          }
        }
        await commit([], lastOffset + 1n);
      }
      if (o.afterCommit) await o.afterCommit();
      applied += appliedNow;
      handled.inc({ group: o.groupId, topic: o.topic, outcome: 'applied' }, appliedNow);
      handled.inc({ group: o.groupId, topic: o.topic, outcome: 'skipped_duplicate' }, valid.length - appliedNow - refused);
      end();
    },
  });

  /** Sends records to `<topic>.dlq` with the reason and their origin in headers, counted and logged. */
  async function deadLetter(dead: { record: BusRecord; reason: string }[]): Promise<void> {
    if (dead.length === 0) return;
    await o.bus.publish(
      dlq(o.topic),
      dead.map(({ record, reason }) => ({
        key: record.key ?? '',
        value: record.value,
        headers: {
          ...record.headers,
          // The reason may quote the record (a JSON.parse message does): made storable for any header store.
          [H.dlqReason]: reason.slice(0, 1000).replace(/\u0000/g, '\\u0000').toWellFormed(),
          [H.dlqSourceTopic]: record.topic,
          [H.dlqSourcePartition]: String(record.partition),
          [H.dlqSourceOffset]: record.offset,
        },
      })),
    );
    deadLetters.inc({ group: o.groupId, topic: o.topic }, dead.length);
    handled.inc({ group: o.groupId, topic: o.topic, outcome: 'dead_letter' }, dead.length);
    for (const d of dead) log.warn({ partition: d.record.partition, offset: d.record.offset, reason: d.reason }, 'record sent to dead-letter topic');
  }

  const lagEvery = o.lagIntervalMs ?? 5_000;
  const timer =
    lagEvery > 0
      ? setInterval(() => {
          o.bus
            .lag(o.groupId, [o.topic])
            .then((rows) => rows.forEach((r) => lagGauge.set({ group: o.groupId, topic: r.topic, partition: String(r.partition) }, r.lag)))
            .catch((e) => log.debug({ err: e }, 'could not read consumer lag'));
        }, lagEvery)
      : null;
  timer?.unref();

  return {
    get applied() {
      return applied;
    },
    async stop() {
      if (timer) clearInterval(timer);
      await sub.stop();
    },
  };
}
