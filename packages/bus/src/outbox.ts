import { sql, type Db, type Queryable } from '@shopstream/db';
import { runProjection, type Projection, type ProjectionOptions } from './projection.js';
import { counter, type Logger } from '@shopstream/telemetry';
import type { Bus, OutgoingRecord } from './port.js';

const published = counter('shopstream_outbox_published_total', 'Outbox rows published to their topic, by outbox table.', ['table']);

/** A record waiting in an outbox table for its topic. */
export interface OutboxRow {
  shop_id: string;
  key: string;
  value: string;
  headers: Record<string, string>;
}

/**
 * Adds rows to an outbox table (columns seq bigserial, shop_id, key, value, headers jsonb) in one
 * statement, inside the caller's transaction: the rows exist exactly when the caller's effects do.
 */
export async function enqueueOutbox(tx: Queryable, table: string, rows: OutboxRow[]): Promise<void> {
  if (rows.length === 0) return;
  await tx.query(sql`
    INSERT INTO ${sql.ident(table)} (shop_id, key, value, headers)
    SELECT * FROM unnest(
      ${rows.map((r) => r.shop_id)}::uuid[], ${rows.map((r) => r.key)}::text[],
      ${rows.map((r) => r.value)}::text[], ${rows.map((r) => JSON.stringify(r.headers))}::jsonb[])`);
}

export interface DrainOutboxOptions {
  db: Db;
  bus: Bus;
  table: string;
  topic: string;
  /** Rows taken per round. */
  batchSize?: number;
}

/** Kafka refuses a record batch over ~1 MB (message.max.bytes): publish in sends well under it. */
const MAX_SEND_BYTES = 512 * 1024;

async function publishInChunks(bus: Bus, topic: string, rows: { key: string; value: string; headers: Record<string, string> }[]): Promise<void> {
  let chunk: OutgoingRecord[] = [];
  let bytes = 0;
  for (const r of rows) {
    const size = Buffer.byteLength(r.value) + r.key.length + 200;
    if (chunk.length > 0 && bytes + size > MAX_SEND_BYTES) {
      // Sequential sends keep the rows' order, so one shop's records stay in order.
      await bus.publish(topic, chunk);
      chunk = [];
      bytes = 0;
    }
    chunk.push({ key: r.key, value: r.value, headers: r.headers });
    bytes += size;
  }
  if (chunk.length > 0) await bus.publish(topic, chunk);
}

/**
 * Publishes an outbox table's rows to `topic` in insertion order and deletes them once the log acknowledged
 * them, until the table is empty. A crash after the publish and before the delete commits publishes those
 * rows again later: at least once, same value. Returns how many rows it published.
 */
export async function drainOutbox(o: DrainOutboxOptions): Promise<number> {
  const batchSize = o.batchSize ?? 5_000;
  const table = sql.ident(o.table);
  let total = 0;
  for (;;) {
    let n: number;
    if (o.db.kind === 'pglite') {
      // PGlite is one connection and the Postgres-log bus writes through it: holding a transaction across
      // the publish would deadlock. One process owns a PGlite database, and the drainer is single-flight,
      // so no other drainer can take these rows meanwhile.
      const rows = await o.db.query(sql`SELECT seq, key, value, headers FROM ${table} ORDER BY seq LIMIT ${batchSize}`);
      if (rows.length > 0) {
        await publishInChunks(o.bus, o.topic, rows);
        await o.db.query(sql`DELETE FROM ${table} WHERE seq = ANY(${rows.map((r) => r.seq)}::bigint[])`);
      }
      n = rows.length;
    } else {
      n = await o.db.tx(async (tx) => {
        // One drainer at a time per table, across processes: rows go out in insertion order, which keeps
        // each shop's records in order even when a timer and a consumer of another replica drain together.
        await tx.query(sql`SELECT pg_advisory_xact_lock(74202, hashtext(${o.table}))`);
        const rows = await tx.query(sql`SELECT seq, key, value, headers FROM ${table} ORDER BY seq LIMIT ${batchSize} FOR UPDATE SKIP LOCKED`);
        if (rows.length === 0) return 0;
        await publishInChunks(o.bus, o.topic, rows);
        await tx.query(sql`DELETE FROM ${table} WHERE seq = ANY(${rows.map((r) => r.seq)}::bigint[])`);
        return rows.length;
      });
    }
    total += n;
    published.inc({ table: o.table }, n);
    if (n < batchSize) return total;
  }
}

export interface OutboxDrainer {
  /** Drains now; concurrent calls share one run (and one queued follow-up), never overlap. */
  drain(): Promise<number>;
  /** Stops the timer and waits for a drain in progress. */
  stop(): Promise<void>;
}

/**
 * drainOutbox on demand (after each commit) and every intervalMs, so rows left by a crash between a
 * commit and its publish go out without waiting for new traffic.
 */
export function startOutboxDrainer(o: DrainOutboxOptions & { logger: Logger; intervalMs?: number }): OutboxDrainer {
  const log = o.logger.child({ outbox: o.table });
  let current: Promise<number> | null = null;
  let queued: Promise<number> | null = null;
  const start = (): Promise<number> => {
    const p = drainOutbox(o);
    current = p;
    const clear = () => {
      if (current === p) current = null;
    };
    p.then(clear, clear);
    return p;
  };
  const drain = (): Promise<number> => {
    if (queued) return queued;
    if (!current) return start();
    // Rows committed after the running drain took its snapshot need one more run after it.
    queued = current
      .catch(() => 0)
      .then(() => {
        queued = null;
        return start();
      });
    return queued;
  };
  const timer = setInterval(() => {
    drain().catch((e) => log.warn({ err: e }, 'periodic outbox drain failed; retrying on the next tick'));
  }, o.intervalMs ?? 1_000);
  timer.unref();
  return {
    drain,
    async stop() {
      clearInterval(timer);
      await (queued ?? current)?.catch((e) => log.warn({ err: e }, 'outbox drain failed while stopping'));
    },
  };
}

/**
 * A projection whose transaction also writes outbox rows, and the drainer that publishes them: rows a crash
 * left behind go out at start, each commit kicks a drain (not awaited: the next batch's Postgres work
 * overlaps this one's Kafka round trips; the rows are committed, so nothing waits on it to be safe), and
 * stop drains once more so what this process committed leaves with it.
 */
export async function runProjectionWithOutbox<T>(
  o: Omit<ProjectionOptions<T>, 'afterCommit'> & { outbox: { table: string; topic: string; intervalMs?: number } },
): Promise<Projection> {
  const { outbox: spec, ...projection } = o;
  const log = o.logger;
  const outbox = startOutboxDrainer({ db: o.db, bus: o.bus, logger: log, table: spec.table, topic: spec.topic, intervalMs: spec.intervalMs ?? 1_000 });
  await outbox.drain().catch((e) => log.warn({ err: e }, 'initial outbox drain failed; the timer retries'));
  const running = await runProjection({
    ...projection,
    afterCommit: async () => {
      outbox.drain().catch((e) => log.warn({ err: e }, 'outbox drain failed; the timer retries'));
    },
  });
  return {
    get applied() {
      return running.applied;
    },
    async stop() {
      await running.stop();
      await outbox.drain().catch((e) => log.warn({ err: e }, 'final outbox drain failed; the rows stay for the next start'));
      await outbox.stop();
    },
  };
}
