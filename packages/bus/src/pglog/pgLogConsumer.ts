import { queryRows, sql, type Db, type Row, type SQLQuery } from '@shopstream/db';
import type { Logger } from '@shopstream/telemetry';
import { ConsumerFailedError, type BatchContext, type BusRecord, type ConsumeOptions } from '../port.js';

export interface PgLogConsumerTuning {
  pollIntervalMs: number;
  leaseMs: number;
  retryBackoffMs: number;
  batchSize: number;
  /**
   * A round that finds fewer records than this waiting (over the partitions it holds) waits for more, up to
   * fetchMaxWaitMs after it first saw them, as a Kafka fetch waits for fetch.min.bytes: at moderate rates each
   * group then takes a batch every fetchMaxWaitMs instead of one per append, each a round of queries.
   */
  fetchMinRecords: number;
  /** The longest a record waits for fetchMinRecords (what a quiet topic adds to a hop's latency); 0: never waits. */
  fetchMaxWaitMs: number;
}

/** While records gather for fetchMinRecords, the partitions' ends are read again at most this often (on an append). */
const FETCH_RECHECK_MS = 25;

export interface PgLogConsumerOptions {
  db: Db;
  log: Logger;
  tuning: PgLogConsumerTuning;
  /** This member's id: the owner written into the leases it holds. */
  member: string;
  /** Partition count of each consumed topic. */
  partitions: Map<string, number>;
  options: ConsumeOptions;
  /** Receives the function that wakes the loop when a topic got new records. */
  onWake(fn: (topic: string) => void): void;
}

interface Owned {
  topic: string;
  partition: number;
  /** The group's committed position: the next offset to deliver. */
  position: bigint;
  /** After a failed batch, the partition rests until then (ms since the epoch). */
  retryAt: number;
  /** No batch handled since this member claimed the partition: the next one starts at the committed position. */
  resumed: boolean;
}

const idOf = (topic: string, partition: number) => `${topic}\u0000${partition}`;

/** A row of bus_records ("offset", key, value, headers, created_at) as a record of the topic's partition. */
export const busRecordOf =
  (topic: string, partition: number) =>
  (r: Row): BusRecord => ({
    topic,
    partition,
    offset: String(r.offset),
    key: r.key === null || r.key === undefined ? null : String(r.key),
    value: toBuffer(r.value),
    headers: (r.headers ?? {}) as Record<string, string>,
    timestamp: (r.created_at as Date).getTime(),
  });

/** A partition's row: its topic, number, and an offset column (next_offset) as a bigint. */
const partitionRow = (r: Row) => ({ topic: String(r.topic), partition: Number(r.partition), nextOffset: BigInt(r.next_offset as string) });

export const toBuffer = (v: unknown): Buffer =>
  Buffer.isBuffer(v) ? v : v instanceof Uint8Array ? Buffer.from(v.buffer, v.byteOffset, v.byteLength) : Buffer.from(String(v), 'utf8');

/**
 * One member of a consumer group on the Postgres log. It holds the partitions it can lease (all of them
 * when it is alone), delivers each one's records in offset order from the committed position, and
 * commits a batch's position only after handleBatch resolved. No transaction is open while a handler
 * runs: on PGlite the handler's own queries would wait behind it.
 */
export function startPgLogConsumer(c: PgLogConsumerOptions): { stop(): Promise<void>; failed: Promise<ConsumerFailedError> } {
  const { db, log, tuning, member, options: o } = c;
  const topics = [...c.partitions.keys()];
  const topicList = sql.join(
    topics.map((t) => sql`${t}`),
    sql`, `,
  );
  const total = [...c.partitions.values()].reduce((a, b) => a + b, 0);
  const lease: SQLQuery = sql`now() + ${tuning.leaseMs} * interval '1 millisecond'`;
  const owned = new Map<string, Owned>();
  let lastClaim = 0;
  let running = true;
  let woken = false;
  let wakeSleep: (() => void) | null = null;
  let stopSleep: (() => void) | null = null;
  /** When the records waiting, fewer than fetchMinRecords, were first seen (undefined: none are waiting so). */
  let gatheringSince: number | undefined;

  const wake = () => {
    woken = true;
    wakeSleep?.();
  };
  c.onWake((topic) => {
    if (c.partitions.has(topic)) wake();
  });

  /** Sleeps ms, or until stopped; until an append wakes the loop too, unless byAppends is false. */
  const sleep = (ms: number, byAppends = true) =>
    new Promise<void>((resolve) => {
      if ((byAppends && woken) || !running) return resolve();
      const t = setTimeout(done, Math.max(0, ms));
      function done() {
        clearTimeout(t);
        wakeSleep = null;
        stopSleep = null;
        resolve();
      }
      if (byAppends) wakeSleep = done;
      stopSleep = done;
    });

  /** Takes every free (or expired, or own) lease of the group's partitions and renews the ones held. */
  const claim = async () => {
    const from = (o.fromBeginning ?? true) ? sql`0` : sql`p.next_offset`;
    const rows = await db.query(sql`
      INSERT INTO bus_group_offsets AS g (group_id, topic, partition, next_offset, owner, lease_until)
      SELECT ${o.groupId}, p.topic, p.partition, ${from}, ${member}, ${lease}
      FROM bus_partitions p WHERE p.topic IN (${topicList})
      ON CONFLICT (group_id, topic, partition) DO UPDATE SET owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until
      WHERE g.owner IS NULL OR g.owner = EXCLUDED.owner OR g.lease_until < now()
      RETURNING g.topic, g.partition, g.next_offset`);
    const held = new Set<string>();
    for (const r of rows.map(partitionRow)) {
      const id = idOf(r.topic, r.partition);
      held.add(id);
      const had = owned.get(id);
      if (had) had.position = r.nextOffset;
      else owned.set(id, { topic: r.topic, partition: r.partition, position: r.nextOffset, retryAt: 0, resumed: true });
    }
    for (const id of [...owned.keys()]) if (!held.has(id)) owned.delete(id);
    lastClaim = Date.now();
  };

  const heartbeat = async (p: Owned) => {
    await db.query(sql`
      UPDATE bus_group_offsets SET lease_until = ${lease}
      WHERE group_id = ${o.groupId} AND topic = ${p.topic} AND partition = ${p.partition} AND owner = ${member}`);
  };

  /**
   * The next batch of each of these partitions, from its position: one query for all of them, so a round costs a
   * round trip, not one per partition. A round takes batchSize records at most, shared between the partitions: in
   * the embedded mode the consumers share the event loop and the connections with ingest, and a round of every
   * partition's batchSize (a backlog of 12) doubled ingest's bulk p99.
   */
  const fetchBatches = async (ps: Owned[]): Promise<Map<string, BusRecord[]>> => {
    const each = Math.ceil(tuning.batchSize / ps.length);
    const rows = await db.query(sql`
      SELECT q.topic, q.partition, b."offset", b.key, b.value, b.headers, b.created_at
      FROM unnest(
        ${ps.map((p) => p.topic)}::text[], ${ps.map((p) => p.partition)}::integer[], ${ps.map((p) => p.position.toString())}::bigint[]
      ) AS q(topic, partition, position)
      CROSS JOIN LATERAL (
        SELECT r."offset", r.key, r.value, r.headers, r.created_at FROM bus_records r
        WHERE r.topic = q.topic AND r.partition = q.partition AND r."offset" >= q.position
        ORDER BY r."offset" LIMIT ${each}
      ) b
      ORDER BY q.topic, q.partition, b."offset"`);
    const batches = new Map<string, BusRecord[]>();
    for (const r of rows) {
      const topic = String(r.topic);
      const partition = Number(r.partition);
      const id = idOf(topic, partition);
      let records = batches.get(id);
      if (!records) batches.set(id, (records = []));
      records.push(busRecordOf(topic, partition)(r));
    }
    return batches;
  };

  type Outcome = { p: Owned; next: bigint } | { p: Owned; rewindTo: bigint } | { p: Owned; failed: true };

  /** Hands one batch of the partition to the handler: what its commit is to do. */
  const handle = async (p: Owned, records: BusRecord[]): Promise<Outcome> => {
    let rewindTo: bigint | null = null;
    const ctx: BatchContext = {
      heartbeat: () => heartbeat(p),
      isRunning: () => running,
      resumed: p.resumed,
      rewind: (offset) => void (rewindTo = BigInt(offset)),
    };
    try {
      await o.handleBatch({ topic: p.topic, partition: p.partition, records }, ctx);
    } catch (e) {
      log.warn({ err: e, topic: p.topic, partition: p.partition, offset: records[0].offset }, 'batch handler failed; the batch will be delivered again');
      p.retryAt = Date.now() + tuning.retryBackoffMs;
      return { p, failed: true };
    }
    if (rewindTo !== null) return { p, rewindTo };
    return { p, next: BigInt(records[records.length - 1].offset) + 1n };
  };

  /**
   * Commits the batches handled: the positions of those that completed in one statement (a partition whose lease
   * ran out during its batch is left to the member that took it), a rewind on its own.
   */
  const commit = async (outcomes: Outcome[]) => {
    const done: { p: Owned; next: bigint }[] = [];
    for (const x of outcomes) {
      if ('next' in x) done.push(x);
      else if ('rewindTo' in x) {
        // The group's position goes back to the handler's (a claim reads it again), and the next batch starts there.
        const { p, rewindTo: to } = x;
        log.warn({ topic: p.topic, partition: p.partition, from: p.position.toString(), to: String(to) }, 'rewinding the partition');
        await db.query(sql`
          UPDATE bus_group_offsets SET next_offset = ${to.toString()}::bigint, updated_at = now()
          WHERE group_id = ${o.groupId} AND topic = ${p.topic} AND partition = ${p.partition} AND owner = ${member}`);
        p.position = to;
      }
    }
    if (done.length === 0) return;
    const rows = await db.query(sql`
      UPDATE bus_group_offsets AS g SET next_offset = v.next_offset, lease_until = ${lease}, updated_at = now()
      FROM unnest(
        ${done.map((d) => d.p.topic)}::text[], ${done.map((d) => d.p.partition)}::integer[], ${done.map((d) => d.next.toString())}::bigint[]
      ) AS v(topic, partition, next_offset)
      WHERE g.group_id = ${o.groupId} AND g.topic = v.topic AND g.partition = v.partition AND g.owner = ${member}
      RETURNING g.topic, g.partition`);
    const kept = new Set(rows.map((r) => idOf(String(r.topic), Number(r.partition))));
    for (const { p, next } of done) {
      if (kept.has(idOf(p.topic, p.partition))) {
        p.resumed = false;
        p.position = next;
        continue;
      }
      // Another member took the partition (our lease ran out during the batch): it redelivers from the
      // committed position, which is at least once, never a skip.
      log.warn({ topic: p.topic, partition: p.partition }, 'lost the partition lease before committing; another member redelivers the batch');
      owned.delete(idOf(p.topic, p.partition));
      lastClaim = 0;
    }
  };

  /**
   * How many partitions' batches are in handleBatch at once (ConsumeOptions.partitionsAtOnce, as the Kafka adapters):
   * a live projection given them in one turn applies them in one transaction. One at a time on a database of one
   * connection (PGlite), where a handler's transaction would hold the connection the others wait for.
   */
  const atOnce = db.oneConnection ? 1 : Math.max(1, o.partitionsAtOnce ?? 3);

  const round = async () => {
    const claimEvery = owned.size < total ? tuning.pollIntervalMs : tuning.leaseMs / 3;
    if (Date.now() - lastClaim >= claimEvery) await claim();
    woken = false;
    const ends = await queryRows(
      db,
      sql`SELECT topic, partition, next_offset FROM bus_partitions WHERE topic IN (${topicList}) ORDER BY topic, partition`,
      partitionRow,
    );
    const ready: Owned[] = [];
    let nextRetry = Infinity;
    let waiting = 0n;
    for (const e of ends) {
      const p = owned.get(idOf(e.topic, e.partition));
      if (!p || e.nextOffset <= p.position) continue;
      if (p.retryAt > Date.now()) nextRetry = Math.min(nextRetry, p.retryAt);
      else {
        ready.push(p);
        waiting += e.nextOffset - p.position;
      }
    }
    if (ready.length > 0 && running && waiting < BigInt(tuning.fetchMinRecords) && tuning.fetchMaxWaitMs > 0) {
      const now = Date.now();
      gatheringSince ??= now;
      const left = gatheringSince + tuning.fetchMaxWaitMs - now;
      if (left > 0) {
        // Not woken by every append while they gather: the ends are read again at most every FETCH_RECHECK_MS, and
        // only once something was appended (or at the wait's end).
        const first = Math.min(left, FETCH_RECHECK_MS);
        await sleep(first, false);
        if (left > first) await sleep(left - first);
        return;
      }
    }
    gatheringSince = undefined;
    const batches = ready.length > 0 && running ? await fetchBatches(ready) : new Map<string, BusRecord[]>();
    const work = ready.flatMap((p) => {
      const records = batches.get(idOf(p.topic, p.partition));
      return records ? [{ p, records }] : [];
    });
    // atOnce handlers, each taking the next partition's batch when its own is handled; none is started once stopping.
    const outcomes: Outcome[] = [];
    let next = 0;
    const runner = async () => {
      while (running && next < work.length) {
        const { p, records } = work[next++];
        outcomes.push(await handle(p, records));
      }
    };
    await Promise.all(Array.from({ length: Math.min(atOnce, work.length) }, runner));
    await commit(outcomes);
    if (outcomes.length === 0 && running) await sleep(Math.min(tuning.pollIntervalMs, nextRetry - Date.now()));
  };

  const loop = (async () => {
    let failures = 0;
    while (running) {
      try {
        await round();
        if (failures > 0) o.onRunning?.(true);
        failures = 0;
      } catch (e) {
        // The database is away (or the round hit a bug): back off up to the poll interval, log each time.
        failures++;
        log.error({ err: e, failures }, 'Postgres-log consumer round failed; retrying');
        if (failures === 1) o.onRunning?.(false, e);
        woken = false;
        await sleep(Math.min(tuning.pollIntervalMs, tuning.retryBackoffMs * 2 ** Math.min(failures - 1, 10)));
      }
    }
  })();

  // Rounds that fail are retried inside the loop; a loop that ends while running is a bug, and a death.
  const failed = loop.then(
    () => new Promise<ConsumerFailedError>(() => {}),
    (e: unknown) => {
      running = false;
      return new ConsumerFailedError(o.groupId, 'loop_failed', `Postgres-log consumer of ${o.groupId} stopped: ${String(e)}`, { cause: e });
    },
  );
  return {
    failed,
    async stop() {
      running = false;
      wake();
      stopSleep?.();
      await loop.catch(() => {});
      try {
        await db.query(sql`UPDATE bus_group_offsets SET owner = NULL, lease_until = NULL WHERE group_id = ${o.groupId} AND owner = ${member}`);
      } catch (e) {
        // The leases then expire on their own; another member waits leaseMs at most.
        log.warn({ err: e }, 'could not release the partition leases');
      }
    },
  };
}
