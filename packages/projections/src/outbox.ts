import { canCopy, copyRows, queryRows, sql, type Db, type Queryable, type Row } from '@shopstream/db';
import { counter, gauge, type Logger } from '@shopstream/telemetry';
import { PublishRefusedError, BusUnavailableError, RecordsTooLargeError, type Bus, type BusRecord, type OutgoingRecord } from '@shopstream/bus';

const OUTBOX_COLUMNS = ['topic', 'key', 'value', 'headers'];

const published = counter('shopstream_outbox_published_total', 'Outbox records relayed to their topic, by topic.', ['topic']);
const roundRows = gauge(
  'shopstream_outbox_round_rows',
  "Records the outbox relay's next round takes at most (a mark row counts its records), by topic: its batch size, or fewer while the log does not answer sends (a probe of one after a failed send, doubling with each answered round).",
  ['topic'],
);
const slowRounds = counter(
  'shopstream_outbox_failed_rounds_total',
  'Outbox relay rounds whose send failed or timed out, by topic: the next round is a probe of one record.',
  ['topic'],
);

/**
 * The first wait after a failed round, doubled with each further one up to BACKOFF_MAX_MS. Only probes fail in a
 * row (after a failed round the next is one record), and a probe puts at most one record twice on the topic, so a long
 * wait between probes saves nothing and only delays the relay's return: at 30 s the relay woke up to 16 s after
 * a killed broker served again, and the flow-matcher, which reads what it relays, with it (pnpm faults
 * broker-outage: 14.3-14.8 s, goal 10 s).
 */
const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 2_000;
/** After answering every round for this long, the relay's rounds may grow back to the batch size. */
const HEALTHY_AFTER_MS = 30_000;

/**
 * How a relay paces its rounds across runs. A send that timed out may still land: the broker took it and
 * answers late, or the request waits in its socket while the broker stalls. The producer is replaced after a
 * timeout, so the same rows sent again are new records to the broker, not a retry it drops: sending the whole
 * round again after every timeout is how a slow broker got 13 copies of a 5,000-row round. So after a failed
 * round the relay waits (a backoff), sends one row, and doubles the round with each answered send up to a
 * ceiling of a quarter of the round that failed; the ceiling goes back to the batch size once the log has
 * answered every round for HEALTHY_AFTER_MS (time spent backing off does not count: nothing was answered then).
 * While the broker is slow, what can go out twice is the round in flight when it slowed and rounds each at most
 * a quarter of the one before (a third of a round more in all), plus a record per probe.
 */
interface RelayPace {
  /** Records the next round takes at most (rows, or a mark row's records). */
  rows: number;
  /** What rows may grow to until the log has answered every round for HEALTHY_AFTER_MS. */
  ceiling: number;
  /** Rounds that failed in a row. */
  failures: number;
  /** No round before this (Date.now()): after a failed round (failures > 0) or a refused one. */
  resumeAt: number;
  /** Since when every round was answered (null: the last one failed). */
  answeringSince: number | null;
}

export const freshPace = (): RelayPace => ({
  rows: Number.POSITIVE_INFINITY,
  ceiling: Number.POSITIVE_INFINITY,
  failures: 0,
  resumeAt: 0,
  answeringSince: null,
});

/** After a round whose send failed or timed out: the next is a probe of one record, after a backoff. Exported for its unit spec. */
export function slowed(pace: RelayPace, topic: string, roundSize: number): void {
  const now = Date.now();
  pace.failures++;
  // A probe that fails says only that the broker is still away: the ceiling stays for when it answers again.
  if (roundSize > 1) pace.ceiling = Math.max(1, Math.floor(Math.min(pace.ceiling, roundSize) / 4));
  pace.rows = 1;
  pace.answeringSince = null;
  pace.resumeAt = now + Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** (pace.failures - 1));
  slowRounds.inc({ topic });
  roundRows.set({ topic }, pace.rows);
}

/**
 * A round the bus refused before sending any of it (PublishRefusedError: Kafka stalled or away): none of its rows
 * can land, so it is no lost round. Its size and ceiling stay, and the next round waits BACKOFF_MIN_MS, not a
 * doubling backoff: the publisher already probes the broker and lets a round through within a second of its return.
 */
function refused(pace: RelayPace): void {
  pace.resumeAt = Date.now() + BACKOFF_MIN_MS;
  pace.answeringSince = null;
}

function answered(pace: RelayPace, topic: string, batchSize: number): void {
  pace.failures = 0;
  pace.resumeAt = 0;
  const now = Date.now();
  pace.answeringSince ??= now;
  if (now - pace.answeringSince >= HEALTHY_AFTER_MS) pace.ceiling = Number.POSITIVE_INFINITY;
  pace.rows = Math.min(batchSize, pace.ceiling, pace.rows * 2);
  roundRows.set({ topic }, pace.rows);
}

/** A record a projection emits, bound for `topic`. */
export interface EmittedRecord extends OutgoingRecord {
  topic: string;
  /**
   * The record whose handling emitted it: the emitted record's `traceparent` header continues that record's
   * trace (the projection runner sets it; it is stored with the outbox row like every header).
   */
  cause?: BusRecord;
  /**
   * What the projection rebuilds the record from after a crash (ProjectionLogic.recover): a live batch whose
   * records all carry one goes to the outbox as a mark row (appendMarked). No newline in it.
   */
  ref?: string;
}

/**
 * Appends emitted records to the one outbox table (007_projections.sql) in one statement, inside the
 * caller's transaction: the records exist exactly when the effects that emitted them do.
 */
export async function appendToOutbox(tx: Queryable, records: EmittedRecord[]): Promise<void> {
  if (records.length === 0) return;
  const text = (v: EmittedRecord['value']) => (typeof v === 'string' ? v : v.toString('utf8'));
  // PostgreSQL: COPY, about twice the rows per second of the unnest insert (bench/README.md, projector).
  if (canCopy(tx)) {
    await copyRows(
      tx,
      'outbox',
      OUTBOX_COLUMNS,
      records.map((r) => [r.topic, r.key, text(r.value), JSON.stringify(r.headers ?? {})]),
    );
    return;
  }
  await tx.query(sql`
    INSERT INTO outbox (topic, key, value, headers)
    SELECT * FROM unnest(
      ${records.map((r) => r.topic)}::text[], ${records.map((r) => r.key)}::text[],
      ${records.map((r) => text(r.value))}::text[],
      ${records.map((r) => JSON.stringify(r.headers ?? {}))}::jsonb[])`);
}

/** Where a live projector's mark rows go once appended: the relay of their topic, which publishes them from memory. */
export type HoldMarked = (topic: string, seq: string, records: OutgoingRecord[]) => void;

/**
 * Rebuilds a mark row's records from the projection's tables, by the refs its emitted records carried
 * (EmittedRecord.ref), in their order; a row gone meanwhile (an erasure) gives none (ProjectionLogic.recover).
 */
export type RecoverMarked = (q: Queryable, refs: string[]) => Promise<OutgoingRecord[]>;

/**
 * Appends a live projector's batch of emitted records to the outbox as one *mark* row per topic, inside the
 * caller's transaction (019_outbox_marks.sql): not the records, only their refs (EmittedRecord.ref: a metric
 * event's shop and activity id), and the name of the projection that can rebuild the records from its tables
 * (`mark`, ProjectionLogic.recover). The records themselves are handed to `hold` under the row's seq: the
 * relay of this process publishes them from memory. Only a crash between the commit and the relay makes a relay
 * rebuild them from the refs. One small row per batch instead of a row per record, written, read back and
 * deleted, took the activity projector from about 7,400 to about 8,700 events/s here (bench/README.md, "The
 * outbox: marks instead of rows"). A batch with a record without a ref goes as rows (appendToOutbox).
 */
export async function appendMarked(tx: Queryable, records: EmittedRecord[], mark: string, hold: HoldMarked): Promise<void> {
  if (records.length === 0) return;
  if (records.some((r) => r.ref === undefined || r.ref.includes('\n'))) return appendToOutbox(tx, records);
  const byTopic = new Map<string, EmittedRecord[]>();
  for (const r of records) {
    const list = byTopic.get(r.topic) ?? [];
    list.push(r);
    byTopic.set(r.topic, list);
  }
  for (const [topic, list] of byTopic) {
    const [row] = await tx.query(sql`
      INSERT INTO outbox (topic, key, value, headers, mark, records)
      VALUES (${topic}, '', ${list.map((r) => r.ref).join('\n')}, '{}'::jsonb, ${mark}, ${list.length})
      RETURNING seq`);
    hold(
      topic,
      String(row.seq),
      list.map((r) => ({ key: r.key, value: r.value, headers: r.headers })),
    );
  }
}

export interface RelayOptions {
  db: Db;
  bus: Bus;
  /** The topic whose outbox records this relay publishes. */
  topic: string;
  /**
   * The topic's name without the deployment's prefix: rows moved over from the old per-effect outboxes
   * by migration 007 carry it as `@<name>`.
   */
  legacyName?: string;
  /** Records taken per round (a mark row counts its records; a round takes at least one row). */
  batchSize?: number;
  /** Mark rows' records this process appended (appendMarked), published from here instead of rebuilt. */
  held?: HeldRecords;
  /** How mark rows are rebuilt, by the projection that wrote them (the row's `mark`); a relay without one stops at such a row. */
  recover?: Record<string, RecoverMarked>;
}

/**
 * The records of mark rows this process appended, by seq, until its relay publishes them. An entry whose row
 * another process relayed (a replica's relay, or one that took the row between commit and hand-over), or whose
 * transaction rolled back, is dropped once the relay has passed its seq: rows go out in seq order.
 */
export class HeldRecords {
  private readonly bySeq = new Map<string, OutgoingRecord[]>();
  private records = 0;
  /** `max`: records held at most; past it (the relay is behind: the log does not answer) rows are read back instead. */
  constructor(private readonly max = 100_000) {}
  hold(seq: string, records: OutgoingRecord[]): void {
    if (this.records + records.length > this.max) return;
    this.bySeq.set(seq, records);
    this.records += records.length;
  }
  get(seq: string): OutgoingRecord[] | undefined {
    return this.bySeq.get(seq);
  }
  /** What is left of a row the relay sent in part: held whatever the bound (its records were held already). */
  replace(seq: string, records: OutgoingRecord[]): void {
    this.records += records.length - (this.bySeq.get(seq)?.length ?? 0);
    this.bySeq.set(seq, records);
  }
  get size(): number {
    return this.bySeq.size;
  }
  /** Forgets every entry up to `seq`: the relay has passed it. */
  passed(seq: string): void {
    const last = BigInt(seq);
    for (const [s, records] of this.bySeq) {
      if (BigInt(s) > last) continue;
      this.bySeq.delete(s);
      this.records -= records.length;
    }
  }
}

/** A row of the outbox as the relay reads it: its place and its records (a mark row's, or the row's one). */
interface OutboxRow {
  seq: string;
  records: OutgoingRecord[];
  /** A mark row taken in part: the records it leaves for the next round. */
  rest?: OutgoingRecord[];
}

/** The columns the relay reads: a mark row's refs (its value) only when its records are not held (see HeldRecords). */
interface RelayRow {
  seq: string;
  mark: string | null;
  count: number;
  key: string | null;
  value: string | null;
  headers: unknown;
}
const relayRow = (r: Row): RelayRow => ({
  seq: String(r.seq),
  mark: r.mark === null || r.mark === undefined ? null : String(r.mark),
  count: Number(r.records),
  key: r.key === null ? null : String(r.key),
  value: r.value === null ? null : String(r.value),
  headers: r.headers,
});

/**
 * Publishes the rows' records in insertion order (the adapter splits each publish into sends by size,
 * splitForSend) and returns how many of the first rows went out whole: all of them, or, when the log refused
 * records as larger than the topic takes (a topic created elsewhere with a smaller max.message.bytes than
 * Shopstream's), the rows before the one whose records it would not take even one at a time. Rejects when
 * not even the first row goes out whole. A row partly sent is sent whole again later (at least once).
 */
async function publishRows(bus: Bus, topic: string, rows: OutboxRow[]): Promise<number> {
  const records = rows.flatMap((r) => r.records);
  const ends: number[] = [];
  for (const r of rows) ends.push((ends.at(-1) ?? 0) + r.records.length);
  const whole = (sent: number) => ends.filter((e) => e <= sent).length;
  let at = 0;
  let n = records.length;
  while (at < records.length) {
    n = Math.min(n, records.length - at);
    try {
      await bus.publish(topic, records.slice(at, at + n));
      at += n;
    } catch (e) {
      if (!(e instanceof RecordsTooLargeError)) throw e;
      if (n === 1) {
        if (whole(at) === 0) throw e;
        return whole(at);
      }
      n = Math.ceil(n / 2);
    }
  }
  return rows.length;
}

/**
 * Publishes the outbox's records for one topic in insertion order and deletes them once the log
 * acknowledged them, until none is left. A crash after the publish and before the delete commits publishes
 * those records again later: at least once, same value. Returns how many it published.
 */
export function relayOutbox(o: RelayOptions): Promise<number> {
  return relayRounds(o, freshPace());
}

/** relayOutbox, its rounds sized by pace (see RelayPace), which a failed send shrinks and answered ones grow. */
async function relayRounds(o: RelayOptions, pace: RelayPace): Promise<number> {
  const batchSize = o.batchSize ?? 5_000;
  const names = o.legacyName ? [o.topic, `@${o.legacyName}`] : [o.topic];
  let total = 0;
  for (;;) {
    const limit = Math.max(1, Math.min(batchSize, pace.rows));
    let round: Round;
    try {
      round = await oneRound(limit);
    } catch (e) {
      if (e instanceof PublishRefusedError) refused(pace);
      else if (e instanceof BusUnavailableError) slowed(pace, o.topic, limit);
      throw e;
    }
    if (round.taken > 0) answered(pace, o.topic, batchSize);
    total += round.records;
    published.inc({ topic: o.topic }, round.records);
    if (round.last !== undefined) o.held?.passed(round.last);
    if (round.read < limit && round.sent === round.read) return total;
  }

  /** One round's rows: read (at most limit), taken (up to limit records), sent whole; records sent; the last row sent. */
  interface Round {
    read: number;
    taken: number;
    sent: number;
    records: number;
    last?: string;
  }

  /**
   * The round's rows: the first ones up to `limit` records (at least one row), each with its records: a mark
   * row's held ones from memory, or rebuilt by its projection's recover (after a crash; its refs read in a
   * second query, only when taken). A row that holds more than `limit` records (a probe after a failed send,
   * or a round shrunk by one) gives its first `limit`, and the rest is held for the next round: a probe is one
   * record. A mark row this relay cannot rebuild (no recover for its projection: a relay of another kind of
   * process) ends the round before it, for the projection's own relay.
   */
  async function take(q: Queryable, limit: number, lock: boolean): Promise<{ read: number; rows: OutboxRow[] }> {
    const held = o.held;
    const read = await queryRows(
      q,
      sql`SELECT seq, mark, records, headers,
                 CASE WHEN mark IS NULL THEN key END AS key, CASE WHEN mark IS NULL THEN value END AS value
          FROM outbox WHERE topic = ANY(${names}::text[]) ORDER BY seq LIMIT ${limit}${lock ? sql` FOR UPDATE SKIP LOCKED` : sql``}`,
      relayRow,
    );
    const taken: { row: RelayRow; mine?: OutgoingRecord[] }[] = [];
    let records = 0;
    let blocked = false;
    for (const row of read) {
      const mine = row.mark !== null ? held?.get(row.seq) : undefined;
      if (row.mark !== null && !mine && !o.recover?.[row.mark]) {
        blocked = true;
        break;
      }
      const count = mine?.length ?? row.count;
      if (taken.length > 0 && records + count > limit) break;
      taken.push({ row, mine });
      records += count;
    }
    const rebuild = taken.filter((t) => t.row.mark !== null && !t.mine);
    const rebuilt = new Map<string, OutgoingRecord[]>();
    if (rebuild.length > 0) {
      const refs = await q.query(sql`SELECT seq, value FROM outbox WHERE seq = ANY(${rebuild.map((t) => t.row.seq)}::bigint[])`);
      const bySeq = new Map(refs.map((r) => [String(r.seq), String(r.value)]));
      for (const { row } of rebuild) rebuilt.set(row.seq, await o.recover![row.mark!](q, bySeq.get(row.seq)!.split('\n')));
    }
    const rows = taken.map(({ row: r, mine }): OutboxRow => {
      if (r.mark === null) return { seq: r.seq, records: [{ key: r.key!, value: r.value!, headers: r.headers as Record<string, string> }] };
      return { seq: r.seq, records: mine ?? rebuilt.get(r.seq)! };
    });
    const first = rows[0];
    if (held && first && first.records.length > limit) {
      return { read: read.length, rows: [{ seq: first.seq, records: first.records.slice(0, limit), rest: first.records.slice(limit) }] };
    }
    // Stopped at a row it cannot rebuild: the run ends after what it took (as if the outbox ended there).
    return { read: blocked ? rows.length : read.length, rows };
  }

  async function send(q: Queryable, read: number, rows: OutboxRow[]): Promise<Round> {
    if (rows.length === 0) return { read, taken: 0, sent: 0, records: 0 };
    const sent = await publishRows(o.bus, o.topic, rows);
    const records = rows.slice(0, sent).reduce((n, r) => n + r.records.length, 0);
    const partial = rows[0].rest;
    if (partial && sent === 1) {
      // Part of a mark row went out: the row stays, its other records held for the next round (a crash sends
      // the row whole again: at least once).
      o.held!.replace(rows[0].seq, partial);
      return { read, taken: 1, sent: 0, records };
    }
    if (sent > 0) await q.query(sql`DELETE FROM outbox WHERE seq = ANY(${rows.slice(0, sent).map((r) => r.seq)}::bigint[])`);
    // A round that took fewer rows than it read is not the last: its `sent` is below `read`.
    return { read, taken: rows.length, sent, records, last: sent > 0 ? rows[sent - 1].seq : undefined };
  }

  async function oneRound(limit: number): Promise<Round> {
    if (o.db.oneConnection) {
      // PGlite is one connection and the Postgres-log bus writes through it: holding a transaction across
      // the publish would deadlock. One process owns a PGlite database, and the relay is single-flight,
      // so no other relay can take these rows meanwhile.
      const { read, rows } = await take(o.db, limit, false);
      return send(o.db, read, rows);
    }
    return o.db.tx(async (tx) => {
      // One relay at a time per topic, across processes: records go out in insertion order, which keeps
      // each shop's records in order even when a timer and a consumer of another replica relay together.
      await tx.query(sql`SELECT pg_advisory_xact_lock(74202, hashtext(${o.topic}))`);
      const { read, rows } = await take(tx, limit, true);
      return send(tx, read, rows);
    });
  }
}

export interface OutboxRelay {
  /** Relays now; concurrent calls share one run (and one queued follow-up), never overlap. */
  relay(): Promise<number>;
  /** Stops the timer and waits for a run in progress. */
  stop(): Promise<void>;
}

/**
 * relayOutbox on demand (after each commit) and every intervalMs, so records left by a crash between a
 * commit and its publish go out without waiting for new traffic.
 */
export function startOutboxRelay(o: RelayOptions & { logger: Logger; intervalMs?: number }): OutboxRelay {
  const log = o.logger.child({ outbox_topic: o.topic });
  const pace = freshPace();
  let current: Promise<number> | null = null;
  let queued: Promise<number> | null = null;
  let stopped = false;
  let wake: (() => void) | null = null;
  /** Waits out the backoff after a failed round (RelayPace); stop() ends the wait, and the run with it. */
  const backoff = async (): Promise<boolean> => {
    const ms = pace.resumeAt - Date.now();
    if (ms > 0 && !stopped) {
      if (pace.failures > 0) log.info({ ms, failures: pace.failures }, 'outbox relay backing off: its last send failed or timed out');
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, ms);
        wake = () => (clearTimeout(t), resolve());
      });
      wake = null;
    }
    return !stopped;
  };
  const start = (): Promise<number> => {
    const p = backoff().then((go) => (go ? relayRounds(o, pace) : 0));
    current = p;
    const clear = () => {
      if (current === p) current = null;
    };
    p.then(clear, clear);
    return p;
  };
  const relay = (): Promise<number> => {
    if (queued) return queued;
    if (!current) return start();
    // Rows committed after the running relay took its snapshot need one more run after it.
    queued = current
      .catch(() => 0)
      .then(() => {
        queued = null;
        return start();
      });
    return queued;
  };
  // The timer looks before it relays: one indexed read when the outbox is empty (nearly always: every commit
  // kicks the relay) instead of a transaction with a lock, a locking read and a commit every tick.
  const names = o.legacyName ? [o.topic, `@${o.legacyName}`] : [o.topic];
  const timer = setInterval(() => {
    if (current || queued || Date.now() < pace.resumeAt) return;
    o.db
      .query(sql`SELECT EXISTS (SELECT 1 FROM outbox WHERE topic = ANY(${names}::text[])) AS any`)
      .then((r) => (r[0]?.any ? relay() : 0))
      .catch((e) => log.warn({ err: e }, 'periodic outbox relay failed; retrying on the next tick'));
  }, o.intervalMs ?? 1_000);
  timer.unref();
  return {
    relay,
    async stop() {
      stopped = true;
      clearInterval(timer);
      wake?.();
      await (queued ?? current)?.catch((e) => log.warn({ err: e }, 'outbox relay failed while stopping'));
    },
  };
}
