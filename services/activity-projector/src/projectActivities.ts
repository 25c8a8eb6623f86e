import { sql, type Queryable } from '@shopstream/db';
import { enqueueOutbox, type OutboxRow, type ValidRecord } from '@shopstream/bus';
import { headers as H, schemas, type EventRecord, type MetricEvent } from '@shopstream/contracts';

export const METRIC_OUTBOX = 'metric_outbox';

/** The metric event a new Activity emits: its id is the activity id, so consumers deduplicate by id. */
export function metricEventOf(e: EventRecord, recordedAt: Date): MetricEvent {
  return {
    id: e.activity_id,
    shop_id: e.shop_id,
    activity_id: e.activity_id,
    ...e.metric,
    name: e.name,
    description: e.description,
    event_time: e.event_time,
    recorded_at: recordedAt.toISOString(),
    contact: e.contact,
    remote_id: e.remote_id,
    remote_platform: e.remote_platform,
  };
}

export function metricOutboxRow(m: MetricEvent): OutboxRow {
  return {
    shop_id: m.shop_id,
    key: m.shop_id,
    value: JSON.stringify(m),
    headers: { [H.contentType]: 'application/json', [H.schema]: schemas.metricEvent, [H.shopId]: m.shop_id, [H.metricName]: m.metric_name },
  };
}

/**
 * Applies a batch of `events` records in the caller's transaction: new activities (one multi-row insert;
 * a replayed activity id inserts nothing), their timeline entries, and one outbox row per NEW activity.
 * Returns the ids of the activities it created.
 */
export async function projectActivities(tx: Queryable, records: ValidRecord<EventRecord>[], recordedAt: Date): Promise<string[]> {
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
    SELECT u.shop_id, u.id, u.name, u.description, u.event_time, ${recordedAt}::timestamptz, u.metric, u.contact_id, u.contact, u.remote_id, u.remote_platform
    FROM unnest(
      ${events.map((e) => e.shop_id)}::uuid[],
      ${events.map((e) => e.activity_id)}::uuid[],
      ${events.map((e) => e.name)}::text[],
      ${events.map((e) => e.description)}::text[],
      ${events.map((e) => e.event_time)}::timestamptz[],
      ${events.map((e) => JSON.stringify(e.metric))}::jsonb[],
      ${events.map((e) => e.contact?.id ?? null)}::uuid[],
      ${events.map((e) => (e.contact ? JSON.stringify(e.contact) : null))}::jsonb[],
      ${events.map((e) => e.remote_id)}::text[],
      ${events.map((e) => e.remote_platform)}::text[]
    ) AS u(shop_id, id, name, description, event_time, metric, contact_id, contact, remote_id, remote_platform)
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
  // In log order, so each shop's metric events keep the order of its events.
  await enqueueOutbox(tx, METRIC_OUTBOX, created.map((e) => metricOutboxRow(metricEventOf(e, recordedAt))));
  return created.map((e) => e.activity_id);
}
