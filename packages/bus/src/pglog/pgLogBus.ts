import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import { queryRows, sql, type Db, type SQLQuery } from '@shopstream/db';
import type { Logger } from '@shopstream/telemetry';
import {
  BusUnavailableError,
  PublishAbandonedError,
  type Bus,
  type BusRecord,
  type ConfigChange,
  type OutgoingRecord,
  type Subscription,
  type TopicSpec,
} from '../port.js';
import { createMicroBatcher } from '../microBatcher.js';
import { recordsBefore } from '../offsetMath.js';
import { appendRecords, busNotifyChannel, UnknownTopicError } from './appendRecords.js';
import { busRecordOf, startPgLogConsumer, type PgLogConsumerTuning } from './pgLogConsumer.js';
import { trimExpiredRecords } from './trimRecords.js';

export interface PgLogBusOptions {
  db: Db;
  logger: Logger;
  /**
   * Consumers are woken by NOTIFY; this slow poll only covers a lost notification (e.g. the LISTEN
   * connection dropped) and takes over partitions another member of the group released.
   */
  pollIntervalMs?: number;
  /** How long a member holds a partition without renewing it, before another member may take it. */
  leaseMs?: number;
  /** Wait before a batch whose handler threw is delivered again. */
  retryBackoffMs?: number;
  /** Most records per batch. */
  batchSize?: number;
  /**
   * A consumer takes its records once this many wait for it, or once the first of them waited fetchMaxWaitMs (as a
   * Kafka fetch's fetch.min.bytes and fetch.max.wait.ms); defaults 100 records and 100 ms. fetchMaxWaitMs 0 takes
   * each append at once.
   */
  fetchMinRecords?: number;
  fetchMaxWaitMs?: number;
  /**
   * How often records past their topic's retention are deleted (trimRecords.ts); 0 never, e.g. for a
   * short-lived command. Every process on the database may trim: deleting the same rows twice is harmless.
   */
  trimIntervalMs?: number;
}

/** A topic setting the Postgres log cannot honour. */
export class UnsupportedTopicConfigError extends Error {
  constructor(topic: string, name: string, value: string) {
    super(
      `The Postgres-log bus cannot apply ${name}=${value} to topic "${topic}": it knows retention.ms (-1 or a positive number of ms) and retention.bytes=-1 only`,
    );
    this.name = 'UnsupportedTopicConfigError';
  }
}

/** The retention.ms a spec asks for (-1 when it names none), refusing what this log cannot do. */
function retentionMsOf(spec: TopicSpec): string {
  for (const [name, value] of Object.entries(spec.config ?? {})) {
    const ok = name === 'retention.ms' ? value === '-1' || /^[1-9]\d*$/.test(value) : name === 'retention.bytes' && value === '-1';
    if (!ok) throw new UnsupportedTopicConfigError(spec.topic, name, value);
  }
  return spec.config?.['retention.ms'] ?? '-1';
}

const topicList = (topics: string[]): SQLQuery =>
  sql.join(
    topics.map((t) => sql`${t}`),
    sql`, `,
  );

/**
 * The Bus port on Postgres tables (004_bus_log.sql), for the embedded mode on PGlite or on a server.
 * Records are placed like Kafka places them (murmur2 of the key), offsets are dense per partition,
 * and a consumer group's position lives in bus_group_offsets. Nothing is read from the database
 * until the bus is used, so a bus over an unreachable database exists and reports itself unavailable.
 */
export async function createPgLogBus(opts: PgLogBusOptions): Promise<Bus> {
  const { db } = opts;
  const log = opts.logger.child({ component: 'pglog-bus' });
  const tuning: PgLogConsumerTuning = {
    pollIntervalMs: opts.pollIntervalMs ?? 2_000,
    leaseMs: opts.leaseMs ?? 30_000,
    retryBackoffMs: opts.retryBackoffMs ?? 500,
    batchSize: opts.batchSize ?? 500,
    fetchMinRecords: opts.fetchMinRecords ?? 100,
    fetchMaxWaitMs: opts.fetchMaxWaitMs ?? 100,
  };

  // A topic's partition count never changes once created (ensureTopics leaves existing topics alone).
  const partitionCounts = new Map<string, number>();
  const partitionsOf = async (topics: string[]): Promise<Map<string, number>> => {
    const unknown = topics.filter((t) => !partitionCounts.has(t));
    if (unknown.length > 0) {
      const rows = await queryRows(
        db,
        sql`SELECT topic, partitions FROM bus_topics WHERE topic IN (${topicList(unknown)})`,
        (r) => [String(r.topic), Number(r.partitions)] as const,
      );
      for (const [topic, partitions] of rows) partitionCounts.set(topic, partitions);
      const missing = unknown.filter((t) => !partitionCounts.has(t));
      if (missing.length > 0) throw new UnknownTopicError(missing);
    }
    return new Map(topics.map((t) => [t, partitionCounts.get(t)!]));
  };

  const unavailable = (e: unknown, what: string): unknown =>
    e instanceof UnknownTopicError || e instanceof BusUnavailableError ? e : new BusUnavailableError(`${what}: ${(e as Error).message}`, { cause: e });

  // Concurrent publishes share one transaction: while one append runs, the next one fills.
  const batcher = createMicroBatcher<{ topic: string; partitions: number; records: OutgoingRecord[] }>({
    lingerMs: 0,
    maxWeight: 5_000,
    weight: (item) => item.records.length,
    async flush(items) {
      try {
        // One statement, its own transaction: one round trip per batch.
        await appendRecords(db, items);
      } catch (e) {
        throw unavailable(e, 'the Postgres log did not take the records');
      }
    },
  });

  // One LISTEN per bus, fanned out to its consumers.
  const wakers = new Set<(topic: string) => void>();
  let listening: Promise<() => Promise<void>> | null = null;
  const ensureListening = async () => {
    listening ??= db.listen(busNotifyChannel, (topic) => {
      for (const w of wakers) w(topic);
    });
    try {
      await listening;
    } catch (e) {
      listening = null;
      throw e;
    }
  };

  const subscriptions = new Set<Subscription>();
  const member = `${hostname()}/${process.pid}`;

  // Unref'd: a process with nothing else to do exits without waiting for the next trim.
  let trimming: Promise<void> | null = null;
  const trimEvery = opts.trimIntervalMs ?? 60_000;
  const trimTimer =
    trimEvery > 0
      ? setInterval(() => {
          trimming ??= trimExpiredRecords(db)
            .then((trimmed) => {
              for (const t of trimmed) log.info(t, 'deleted records past their topic retention');
            })
            .catch((e) => log.warn({ err: e }, 'trimming records past their topic retention failed; the next run retries'))
            .finally(() => (trimming = null));
        }, trimEvery).unref()
      : null;

  return {
    description: 'the Postgres log',
    messagingSystem: 'shopstream_pglog',
    selfManaged: true,

    async ensureTopics(specs: TopicSpec[]) {
      if (specs.length === 0) return;
      const topics = specs.map((s) => s.topic);
      const rows = specs.map((s) => sql`(${s.topic}, ${s.partitions}, ${retentionMsOf(s)}::bigint)`);
      await db.tx(async (tx) => {
        await tx.query(sql`
          INSERT INTO bus_topics (topic, partitions, retention_ms)
          VALUES ${sql.join(rows, sql`, `)}
          ON CONFLICT (topic) DO NOTHING`);
        await tx.query(sql`
          INSERT INTO bus_partitions (topic, partition)
          SELECT t.topic, p FROM bus_topics t, generate_series(0, t.partitions - 1) AS p
          WHERE t.topic IN (${topicList(topics)})
          ON CONFLICT (topic, partition) DO NOTHING`);
      });
    },

    async alignTopicConfigs(specs) {
      const wanted = specs.filter((s) => s.config?.['retention.ms'] !== undefined);
      const asked = new Map(wanted.map((s) => [s.topic, retentionMsOf(s)]));
      if (asked.size === 0) return [];
      return db.tx(async (tx) => {
        const rows = await queryRows(
          tx,
          sql`SELECT topic, retention_ms FROM bus_topics WHERE topic IN (${topicList([...asked.keys()])}) ORDER BY topic FOR UPDATE`,
          (r) => ({ topic: String(r.topic), retention_ms: String(r.retention_ms) }),
        );
        const changes: ConfigChange[] = [];
        for (const r of rows) {
          const to = asked.get(r.topic)!;
          if (String(r.retention_ms) === to) continue;
          await tx.query(sql`UPDATE bus_topics SET retention_ms = ${to}::bigint WHERE topic = ${r.topic}`);
          changes.push({ topic: r.topic, name: 'retention.ms', from: String(r.retention_ms), inherited: false, to });
        }
        return changes;
      });
    },

    async topicConfigs(topics) {
      if (topics.length === 0) return {};
      const rows = await db.query(sql`SELECT topic, retention_ms FROM bus_topics WHERE topic IN (${topicList(topics)})`);
      const found = new Map(rows.map((r) => [r.topic as string, String(r.retention_ms)]));
      const missing = topics.filter((t) => !found.has(t));
      if (missing.length > 0) throw new UnknownTopicError(missing);
      return Object.fromEntries(topics.map((t) => [t, { 'retention.ms': found.get(t)!, 'retention.bytes': '-1' }]));
    },

    async publish(topic, records, opts) {
      if (records.length === 0) return;
      let partitions: number;
      try {
        partitions = (await partitionsOf([topic])).get(topic)!;
      } catch (e) {
        throw unavailable(e, 'the Postgres log cannot be read');
      }
      // Asked here, after the look-up's turn, rather than in the append's batch (it has no linger: nothing waits there).
      if (opts?.abandoned?.() === true) throw new PublishAbandonedError();
      await batcher.add({ topic, partitions, records });
    },

    async consume(o) {
      const partitions = await partitionsOf(o.topics);
      const wake = { fn: (_topic: string) => {} };
      const waker = (topic: string) => wake.fn(topic);
      wakers.add(waker);
      try {
        await ensureListening();
        const consumer = startPgLogConsumer({
          db,
          log: log.child({ group: o.groupId }),
          tuning,
          member: `${member}/${randomUUID()}`,
          partitions,
          options: o,
          onWake: (fn) => (wake.fn = fn),
        });
        const sub: Subscription = {
          failed: consumer.failed,
          async stop() {
            subscriptions.delete(sub);
            wakers.delete(waker);
            await consumer.stop();
          },
        };
        subscriptions.add(sub);
        return sub;
      } catch (e) {
        wakers.delete(waker);
        throw e;
      }
    },

    async lag(groupId, topics) {
      if (topics.length === 0) return [];
      // The group's position, or the log start when it has none or is below it (trimmed records are no lag).
      const rows = await db.query(sql`
        SELECT p.topic, p.partition, p.next_offset AS high,
               GREATEST(o.next_offset,
                 COALESCE((SELECT min(r."offset") FROM bus_records r WHERE r.topic = p.topic AND r.partition = p.partition), p.next_offset)) AS position
        FROM bus_partitions p
        LEFT JOIN bus_group_offsets o ON o.group_id = ${groupId} AND o.topic = p.topic AND o.partition = p.partition
        WHERE p.topic IN (${topicList(topics)})
        ORDER BY p.topic, p.partition`);
      return rows.map((r) => ({ topic: r.topic as string, partition: Number(r.partition), lag: recordsBefore(String(r.position), String(r.high)) }));
    },

    async offsets(topic) {
      const rows = await db.query(sql`
        SELECT p.partition, p.next_offset AS high,
               COALESCE((SELECT min(r."offset") FROM bus_records r WHERE r.topic = p.topic AND r.partition = p.partition), p.next_offset) AS low
        FROM bus_partitions p WHERE p.topic = ${topic} ORDER BY p.partition`);
      if (rows.length === 0) throw new UnknownTopicError([topic]);
      return rows.map((r) => ({ partition: Number(r.partition), low: String(r.low), high: String(r.high) }));
    },

    async read(topic, ro = {}) {
      if (ro.fromOffset !== undefined && ro.partition === undefined) throw new Error('read: fromOffset needs a partition');
      // The ends first: a row below a partition's next_offset was committed with it (appendRecords moves both
      // in one transaction), so what follows reads only committed records, none published after the call.
      const ends = await db.query(sql`
        SELECT partition, next_offset FROM bus_partitions
        WHERE topic = ${topic} ${ro.partition === undefined ? sql`` : sql`AND partition = ${ro.partition}`}
        ORDER BY partition`);
      if (ends.length === 0) {
        if (ro.partition === undefined) throw new UnknownTopicError([topic]);
        await partitionsOf([topic]);
        throw new Error(`read: topic "${topic}" has no partition ${ro.partition}`);
      }
      const out: BusRecord[] = [];
      for (const e of ends) {
        const partition = Number(e.partition);
        const rows = await queryRows(
          db,
          sql`
          SELECT "offset", key, value, headers, created_at FROM bus_records
          WHERE topic = ${topic} AND partition = ${partition}
            AND "offset" >= ${ro.fromOffset ?? '0'}::bigint AND "offset" < ${String(e.next_offset)}::bigint
          ORDER BY "offset" ${ro.limit === undefined ? sql`` : sql`LIMIT ${ro.limit}`}`,
          busRecordOf(topic, partition),
        );
        out.push(...rows);
      }
      return out;
    },

    async deleteGroup(groupId) {
      await db.query(sql`DELETE FROM bus_group_offsets WHERE group_id = ${groupId}`);
    },

    async ping() {
      try {
        await db.query(sql`SELECT 1`);
        return true;
      } catch (e) {
        log.debug({ err: e }, 'Postgres log ping failed');
        return false;
      }
    },

    async close() {
      if (trimTimer) clearInterval(trimTimer);
      await trimming;
      await Promise.all([...subscriptions].map((s) => s.stop()));
      await batcher.close();
      const l = listening;
      listening = null;
      if (l) await (await l.catch(() => async () => {}))();
    },
  };
}
