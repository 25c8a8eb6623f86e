import { canCopy, copyRows, isUniqueViolation, sql, type Queryable, type Row } from '@shopstream/db';
import type { BusRecord } from '@shopstream/bus';
import type { EmittedRecord, ValidRecord } from '@shopstream/projections';
import { contactInOrder, metricInOrder, metricsTopic, type EventRecord, type MetricEvent } from '@shopstream/contracts';

/**
 * The metric event a new Activity emits: its id is the activity id, so consumers deduplicate by id. Every
 * field comes from the event record; recorded_at is when ingest accepted the event (its received_at), so a
 * rebuild of the projection writes the same value.
 */
export function metricEventOf(e: EventRecord): MetricEvent {
  return {
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
  };
}

/** What a metric event is rebuilt from after a crash (recoverMetricRecords): its activity's shop and id. */
export const metricRef = (e: Pick<EventRecord, 'shop_id' | 'activity_id'>): string => `${e.shop_id}/${e.activity_id}`;

/** A metric event from its Activity row, its fields in metricEventOf's order; times as UTC ISO strings. */
function metricEventOfRow(r: Row): MetricEvent {
  return {
    id: String(r.id),
    shop_id: String(r.shop_id),
    activity_id: String(r.id),
    ...metricInOrder(r.metric as Record<string, unknown>),
    name: String(r.name),
    description: r.description === null ? null : String(r.description),
    event_time: new Date(r.event_time as Date | string).toISOString(),
    recorded_at: new Date(r.recorded_at as Date | string).toISOString(),
    contact: contactInOrder(r.contact as Record<string, unknown> | null),
    remote_id: r.remote_id === null ? null : String(r.remote_id),
    remote_platform: r.remote_platform === null ? null : String(r.remote_platform),
  };
}

/**
 * The metric events of the activities named by refs (metricRef), in that order, rebuilt from their rows: for a
 * crash between a batch's commit and its relay (ProjectionLogic.recover). The same ids and fields as the
 * records the batch emitted; times in UTC (`…Z`, milliseconds) whatever offset the event came with; no
 * traceparent. An activity gone meanwhile (its contact erased) gives none.
 */
export async function recoverMetricRecords(q: Queryable, refs: string[]) {
  const pairs = refs.map((r) => r.split('/'));
  const rows = await q.query(sql`
    SELECT a.shop_id, a.id, a.name, a.description, a.event_time, a.recorded_at, a.metric, a.contact, a.remote_id, a.remote_platform
    FROM unnest(${pairs.map((p) => p[0])}::uuid[], ${pairs.map((p) => p[1])}::uuid[]) WITH ORDINALITY AS k(shop_id, id, n)
    JOIN activities a ON a.shop_id = k.shop_id AND a.id = k.id
    ORDER BY k.n`);
  return rows.map((r) => metricsTopic.record(metricEventOfRow(r)));
}

/** The metric event as emitted: with its ref (metricRef), from which it is rebuilt after a crash. */
export function metricRecord(m: MetricEvent, topic: string, cause?: BusRecord): EmittedRecord {
  return { topic, ...metricsTopic.record(m), ref: metricRef(m), ...(cause ? { cause } : {}) };
}

/** A record whose activity id derives from a key (remote_id or deduping_key): a replay has the same id. */
const isKeyed = (e: EventRecord) => e.remote_id != null || e.metric.deduping_key != null;

/** The columns of an activity row as the projector writes it by COPY, in activityRow's order. */
export const ACTIVITY_COLUMNS = [
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
export const TIMELINE_COLUMNS = ['shop_id', 'contact_id', 'activity_id', 'event_time'];

/** An event's activity row, in ACTIVITY_COLUMNS' order. */
export const activityRow = (e: EventRecord) => [
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

/**
 * Batches of fewer records go in by the one-statement insert: COPY's path takes five round trips (the keyed
 * ids' look-up, a savepoint, two COPYs, its release) against one, and on PostgreSQL 15 here the insert was as
 * fast or faster up to 20-40 rows (1.6 against 3.1 ms for 5 rows, 2.6 against 2.8 for 20, with half the client
 * CPU), COPY ahead from a few hundred. A consumer under a steady load of single events gets batches of tens.
 */
export const COPY_FROM_ROWS = 32;

/**
 * Applies a batch of `events` records in the caller's transaction: new activities (a replayed activity id
 * inserts nothing) and their timeline entries. Returns the events whose activities it created, in log order
 * (each emits one metric event).
 *
 * On PostgreSQL a batch of COPY_FROM_ROWS or more goes in by COPY (about 2.3 times the rows per second of the
 * multi-row insert on this machine, bench/README.md): the keyed events' ids (remote_id or deduping_key: the only ones a client
 * replays) that already exist are looked up first and left out; anything else already there (the same
 * record published twice) makes the COPY fail on the primary key, and the batch then goes through the
 * multi-row `INSERT ... ON CONFLICT DO NOTHING` instead, under a savepoint; a smaller batch goes through that
 * insert at once. Either way each activity is written once.
 */
export async function projectActivities(tx: Queryable, records: ValidRecord<EventRecord>[]): Promise<EventRecord[]> {
  // First write wins, also within one batch.
  const seen = new Set<string>();
  const events: EventRecord[] = [];
  for (const { value } of records) {
    const k = `${value.shop_id}/${value.activity_id}`;
    if (seen.has(k)) continue;
    seen.add(k);
    events.push(value);
  }
  if (events.length === 0) return [];
  if (canCopy(tx) && events.length >= COPY_FROM_ROWS) {
    const fresh = await withoutExisting(tx, events);
    if (fresh.length === 0) return [];
    await tx.query(sql`SAVEPOINT project_activities_copy`);
    try {
      await copyActivities(tx, fresh);
      await tx.query(sql`RELEASE SAVEPOINT project_activities_copy`);
      return fresh;
    } catch (e) {
      if (!isUniqueViolation(e)) throw e;
      await tx.query(sql`ROLLBACK TO SAVEPOINT project_activities_copy`);
    }
  }
  return insertActivities(tx, events);
}

/** events less the keyed ones whose activity exists already. */
async function withoutExisting(tx: Queryable, events: EventRecord[]): Promise<EventRecord[]> {
  const keyed = events.filter(isKeyed);
  if (keyed.length === 0) return events;
  const found = await tx.query(sql`
    SELECT a.shop_id, a.id FROM unnest(${keyed.map((e) => e.shop_id)}::uuid[], ${keyed.map((e) => e.activity_id)}::uuid[]) AS k(shop_id, id)
    JOIN activities a ON a.shop_id = k.shop_id AND a.id = k.id`);
  if (found.length === 0) return events;
  const existing = new Set(found.map((r) => `${r.shop_id}/${r.id}`));
  return events.filter((e) => !existing.has(`${e.shop_id}/${e.activity_id}`));
}

async function copyActivities(tx: Queryable, events: EventRecord[]): Promise<void> {
  await copyRows(tx, 'activities', ACTIVITY_COLUMNS, events.map(activityRow));
  const timeline = [];
  for (const e of events) if (e.contact !== null) timeline.push([e.shop_id, e.contact.id, e.activity_id, e.event_time]);
  await copyRows(tx, 'contact_timeline', TIMELINE_COLUMNS, timeline);
}

/**
 * The multi-row insert, both tables in one statement: ON CONFLICT DO NOTHING, the timeline entries of the
 * activities it created, RETURNING those. Any engine.
 */
async function insertActivities(tx: Queryable, events: EventRecord[]): Promise<EventRecord[]> {
  const inserted = await tx.query(sql`
    WITH created AS (
    INSERT INTO activities (shop_id, id, name, description, event_time, recorded_at, metric, contact_id, contact, remote_id, remote_platform)
    SELECT * FROM unnest(
      ${events.map((e) => e.shop_id)}::uuid[],
      ${events.map((e) => e.activity_id)}::uuid[],
      ${events.map((e) => e.name)}::text[],
      ${events.map((e) => e.description)}::text[],
      ${events.map((e) => e.event_time)}::timestamptz[],
      ${events.map((e) => e.received_at)}::timestamptz[],
      ${events.map((e) => JSON.stringify(e.metric))}::jsonb[],
      ${events.map((e) => e.contact?.id ?? null)}::uuid[],
      ${events.map((e) => (e.contact ? JSON.stringify(e.contact) : null))}::jsonb[],
      ${events.map((e) => e.remote_id)}::text[],
      ${events.map((e) => e.remote_platform)}::text[]
    )
    ON CONFLICT (shop_id, id) DO NOTHING
    RETURNING shop_id, id, contact_id, event_time
    ), timeline AS (
      INSERT INTO contact_timeline (shop_id, contact_id, activity_id, event_time)
      SELECT shop_id, contact_id, id, event_time FROM created WHERE contact_id IS NOT NULL
      ON CONFLICT DO NOTHING
    )
    SELECT shop_id, id FROM created`);
  if (inserted.length === 0) return [];
  const fresh = new Set(inserted.map((r) => `${r.shop_id}/${r.id}`));
  return events.filter((e) => fresh.has(`${e.shop_id}/${e.activity_id}`));
}
