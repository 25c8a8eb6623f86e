/**
 * The projector's writes, bare, two ways, on the same rows in the same run (used by the projector scenario
 * as its baselines, and runnable alone: `npx tsx --conditions=@shopstream/source bench/src/writePaths.ts
 * [events] [rounds]` with DATABASE_URL set):
 * - multi-row insert: unnest() INSERTs of activities, contact_timeline and outbox, as the projector wrote them;
 * - COPY: `COPY ... FROM STDIN` of the same rows into the same three tables.
 * 1,000 rows per transaction, one connection, no parsing, no validation, no offsets, no relay.
 */
import { randomUUID } from 'node:crypto';
import { copyRows, sql, type Db, type Queryable } from '@shopstream/db';
import { metricsTopic, type EventRecord, type MetricEvent } from '@shopstream/contracts';
import { eventMaker, eventRecordOf } from './events.js';

export const BASELINE_BATCH = 1_000;

type WritePath = 'insert' | 'copy';

// The projector's rows as services/activity-projector/src/projectActivities.ts writes them, restated: bench uses
// services' public exports only, and the projector exports no row layout (its tables are its own).
const ACTIVITY_COLUMNS = [
  'shop_id',
  'id',
  'name',
  'description',
  'event_time',
  'recorded_at',
  'metric',
  'contact_id',
  'contact',
  'remote_id',
  'remote_platform',
];
const TIMELINE_COLUMNS = ['shop_id', 'contact_id', 'activity_id', 'event_time'];
const activityRow = (e: EventRecord) => [
  e.shop_id,
  e.activity_id,
  e.name,
  e.description,
  e.event_time,
  e.received_at,
  JSON.stringify(e.metric),
  e.contact?.id ?? null,
  e.contact ? JSON.stringify(e.contact) : null,
  e.remote_id,
  e.remote_platform,
];
/** The metric event a new activity emits, as the projector derives it from its record. */
const metricEventOf = (e: EventRecord): MetricEvent => ({
  id: e.activity_id,
  shop_id: e.shop_id,
  activity_id: e.activity_id,
  ...e.metric,
  name: e.name,
  description: e.description,
  event_time: e.event_time,
  recorded_at: e.received_at,
  contact: e.contact,
  remote_id: e.remote_id,
  remote_platform: e.remote_platform,
});
const metricRecord = (m: MetricEvent, topic: string) => ({ topic, ...metricsTopic.record(m) });

/** The projector's three tables' rows for one batch of events, bare. */
async function bareWrite(tx: Queryable, how: WritePath, events: EventRecord[]): Promise<void> {
  const outbox = events.map((e) => metricRecord(metricEventOf(e), 'metrics'));
  const timeline = events.filter((e) => e.contact !== null);
  if (how === 'copy') {
    await copyRows(tx, 'activities', ACTIVITY_COLUMNS, events.map(activityRow));
    await copyRows(
      tx,
      'contact_timeline',
      TIMELINE_COLUMNS,
      timeline.map((e) => [e.shop_id, e.contact!.id, e.activity_id, e.event_time]),
    );
    await copyRows(
      tx,
      'outbox',
      ['topic', 'key', 'value', 'headers'],
      outbox.map((r) => [r.topic, r.key, r.value as string, JSON.stringify(r.headers)]),
    );
    return;
  }
  await tx.query(sql`
    INSERT INTO activities (shop_id, id, name, description, event_time, recorded_at, metric, contact_id, contact, remote_id, remote_platform)
    SELECT * FROM unnest(
      ${events.map((e) => e.shop_id)}::uuid[], ${events.map((e) => e.activity_id)}::uuid[], ${events.map((e) => e.name)}::text[],
      ${events.map((e) => e.description)}::text[], ${events.map((e) => e.event_time)}::timestamptz[], ${events.map((e) => e.received_at)}::timestamptz[],
      ${events.map((e) => JSON.stringify(e.metric))}::jsonb[], ${events.map((e) => e.contact?.id ?? null)}::uuid[],
      ${events.map((e) => (e.contact ? JSON.stringify(e.contact) : null))}::jsonb[], ${events.map((e) => e.remote_id)}::text[],
      ${events.map((e) => e.remote_platform)}::text[])`);
  await tx.query(sql`
    INSERT INTO contact_timeline (shop_id, contact_id, activity_id, event_time)
    SELECT * FROM unnest(${timeline.map((e) => e.shop_id)}::uuid[], ${timeline.map((e) => e.contact!.id)}::uuid[],
      ${timeline.map((e) => e.activity_id)}::uuid[], ${timeline.map((e) => e.event_time)}::timestamptz[])`);
  await tx.query(sql`
    INSERT INTO outbox (topic, key, value, headers)
    SELECT * FROM unnest(${outbox.map((r) => r.topic)}::text[], ${outbox.map((r) => r.key)}::text[],
      ${outbox.map((r) => r.value as string)}::text[], ${outbox.map((r) => JSON.stringify(r.headers))}::jsonb[])`);
}

/** Writes every record bare in BASELINE_BATCH-row transactions on one connection; rows per second. */
export async function bareRate(db: Db, how: WritePath, records: EventRecord[]): Promise<number> {
  await db.query(sql`TRUNCATE activities, contact_timeline, outbox`);
  const t0 = performance.now();
  for (let i = 0; i < records.length; i += BASELINE_BATCH) {
    const batch = records.slice(i, i + BASELINE_BATCH);
    await db.tx((tx) => bareWrite(tx, how, batch));
  }
  const rate = records.length / ((performance.now() - t0) / 1000);
  await db.query(sql`TRUNCATE activities, contact_timeline, outbox`);
  return Math.round(rate);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { connectPostgres, migrate } = await import('@shopstream/db');
  const n = Number(process.argv[2] ?? 50_000);
  const rounds = Number(process.argv[3] ?? 3);
  const db = connectPostgres({ url: process.env.DATABASE_URL!, poolSize: 2 });
  await migrate(db);
  const shops = Array.from({ length: 8 }, () => randomUUID());
  const makers = shops.map((s, i) => ({ s, m: eventMaker({ seed: `wp-${i}-${Date.now()}` }) }));
  const records = Array.from({ length: n }, (_, i) => eventRecordOf(makers[i % 8].s, makers[i % 8].m.event(), randomUUID()));
  for (let r = 0; r < rounds; r++) {
    const ins = await bareRate(db, 'insert', records);
    const copy = await bareRate(db, 'copy', records);
    console.log(`round ${r}: multi-row insert ${ins} rows/s, COPY ${copy} rows/s, COPY/insert ${(copy / ins).toFixed(2)}`);
  }
  await db.close();
}
