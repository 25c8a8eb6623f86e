import { sql, type Queryable } from '@shopstream/db';
import type { EmittedRecord, ValidRecord } from '@shopstream/bus';
import { metricsTopic, type EventRecord, type MetricEvent } from '@shopstream/contracts';

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

export function metricRecord(m: MetricEvent, topic: string): EmittedRecord {
  return { topic, ...metricsTopic.record(m) };
}

/**
 * Applies a batch of `events` records in the caller's transaction: new activities (one multi-row insert;
 * a replayed activity id inserts nothing) and their timeline entries. Returns the events whose activities
 * it created, in log order (each emits one metric event).
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
  const inserted = await tx.query(sql`
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
    RETURNING shop_id, id`);
  if (inserted.length === 0) return [];
  const fresh = new Set(inserted.map((r) => `${r.shop_id}/${r.id}`));
  const created = events.filter((e) => fresh.has(`${e.shop_id}/${e.activity_id}`));
  const onTimeline = created.filter((e) => e.contact !== null);
  if (onTimeline.length > 0) {
    await tx.query(sql`
      INSERT INTO contact_timeline (shop_id, contact_id, activity_id, event_time)
      SELECT * FROM unnest(
        ${onTimeline.map((e) => e.shop_id)}::uuid[], ${onTimeline.map((e) => e.contact!.id)}::uuid[],
        ${onTimeline.map((e) => e.activity_id)}::uuid[], ${onTimeline.map((e) => e.event_time)}::timestamptz[])
      ON CONFLICT DO NOTHING`);
  }
  return created;
}
