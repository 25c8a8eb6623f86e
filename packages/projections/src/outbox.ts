import { canCopy, copyRows, queryRows, sql, type Db, type Queryable, type Row } from '@shopstream/db';
import { counter, gauge, type Logger } from '@shopstream/telemetry';
import { PublishRefusedError, BusUnavailableError, RecordsTooLargeError, type Bus, type BusRecord, type OutgoingRecord } from '@shopstream/bus';

const OUTBOX_COLUMNS = ['topic', 'key', 'value', 'headers'];

const published = counter('shopstream_outbox_published_total', 'Outbox records relayed to their topic, by topic.', ['topic']);
const roundRows = gauge(
  'shopstream_outbox_round_rows',
  "Rows the outbox relay's next round takes at most, by topic: its batch size, or fewer while the log does not answer sends (a probe of one after a failed send, doubling with each answered round).",
  ['topic'],
);
const slowRounds = counter(
  'shopstream_outbox_failed_rounds_total',
  'Outbox relay rounds whose send failed or timed out, by topic: the next round is a probe of one row.',
  ['topic'],
);

/**
 * The first wait after a failed round, doubled with each further one up to BACKOFF_MAX_MS. Only probes fail in a
 * row (after a failed round the next is one row), and a probe puts at most one row twice on the topic, so a long
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
 * a quarter of the one before (a third of a round more in all), plus a row per probe.
 */
interface RelayPace {
  /** Rows the next round takes at most. */
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

/** After a round whose send failed or timed out: the next is a probe of one row, after a backoff. Exported for its unit spec. */
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
  /** Rows taken per round. */
  batchSize?: number;
}

/** A row of the outbox as the relay reads it: its place and the record. */
interface OutboxRow {
  seq: string;
  record: OutgoingRecord;
}
const outboxRow = (r: Row): OutboxRow => ({
  seq: String(r.seq),
  record: { key: String(r.key), value: String(r.value), headers: r.headers as Record<string, string> },
});

/**
 * Publishes the rows in insertion order, in one publish (the adapter splits it into sends by size, splitForSend),
 * and returns how many of the first rows went out: all of them, or, when the log refused them as larger than the
 * topic takes (a topic created elsewhere with a smaller max.message.bytes than Shopstream's), the longest
 * prefix of halves it took. Rejects when not even the first row goes out.
 */
async function publishRows(bus: Bus, topic: string, rows: OutboxRow[]): Promise<number> {
  for (let n = rows.length; ; n = Math.ceil(n / 2)) {
    try {
      await bus.publish(
        topic,
        rows.slice(0, n).map((r) => r.record),
      );
      return n;
    } catch (e) {
      if (!(e instanceof RecordsTooLargeError) || n === 1) throw e;
    }
  }
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
    /** Rows taken this round, and how many of them went out (all, or a prefix: publishRows). */
    let round: { taken: number; sent: number };
    try {
      round = await oneRound(limit);
    } catch (e) {
      if (e instanceof PublishRefusedError) refused(pace);
      else if (e instanceof BusUnavailableError) slowed(pace, o.topic, limit);
      throw e;
    }
    if (round.taken > 0) answered(pace, o.topic, batchSize);
    total += round.sent;
    published.inc({ topic: o.topic }, round.sent);
    if (round.taken < limit && round.sent === round.taken) return total;
  }

  async function oneRound(limit: number): Promise<{ taken: number; sent: number }> {
    if (o.db.oneConnection) {
      // PGlite is one connection and the Postgres-log bus writes through it: holding a transaction across
      // the publish would deadlock. One process owns a PGlite database, and the relay is single-flight,
      // so no other relay can take these rows meanwhile.
      const rows = await queryRows(
        o.db,
        sql`SELECT seq, key, value, headers FROM outbox WHERE topic = ANY(${names}::text[]) ORDER BY seq LIMIT ${limit}`,
        outboxRow,
      );
      const sent = rows.length > 0 ? await publishRows(o.bus, o.topic, rows) : 0;
      if (sent > 0) await o.db.query(sql`DELETE FROM outbox WHERE seq = ANY(${rows.slice(0, sent).map((r) => r.seq)}::bigint[])`);
      return { taken: rows.length, sent };
    }
    return o.db.tx(async (tx) => {
      // One relay at a time per topic, across processes: records go out in insertion order, which keeps
      // each shop's records in order even when a timer and a consumer of another replica relay together.
      await tx.query(sql`SELECT pg_advisory_xact_lock(74202, hashtext(${o.topic}))`);
      const rows = await queryRows(
        tx,
        sql`SELECT seq, key, value, headers FROM outbox WHERE topic = ANY(${names}::text[]) ORDER BY seq LIMIT ${limit} FOR UPDATE SKIP LOCKED`,
        outboxRow,
      );
      if (rows.length === 0) return { taken: 0, sent: 0 };
      const sent = await publishRows(o.bus, o.topic, rows);
      await tx.query(sql`DELETE FROM outbox WHERE seq = ANY(${rows.slice(0, sent).map((r) => r.seq)}::bigint[])`);
      return { taken: rows.length, sent };
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
