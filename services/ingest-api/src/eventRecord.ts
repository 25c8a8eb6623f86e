import type { EventInput, EventRecord, ResolvedContact } from '@shopstream/contracts';

/** The `events` record of an accepted event: exactly what ingest-api writes (the bench builds its records with it too). */
export function buildRecord(
  e: EventInput,
  m: { id: string; key: string | null; contact: ResolvedContact | null; shopId: string; requestId: string; receivedAt: string },
): EventRecord {
  const record: EventRecord = {
    activity_id: m.id,
    shop_id: m.shopId,
    activity_key: m.key,
    name: e.name,
    description: e.description ?? null,
    event_time: e.event_time ?? m.receivedAt,
    received_at: m.receivedAt,
    remote_id: e.remote_id ?? null,
    remote_platform: e.remote_platform ?? null,
    metric: {
      metric_name: e.metric.metric_name,
      value: e.metric.value ?? null,
      additional_properties: e.metric.additional_properties ?? {},
      context_object_id: e.metric.context_object_id ?? null,
      context_object_type: e.metric.context_object_type ?? null,
      metric_object_id: e.metric.metric_object_id ?? null,
      metric_object_type: e.metric.metric_object_type ?? null,
      deduping_key: e.metric.deduping_key ?? null,
    },
    contact: m.contact,
    request_id: m.requestId,
  };
  return record;
}
