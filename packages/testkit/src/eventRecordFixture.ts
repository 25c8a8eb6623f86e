import type { EventRecord, RecordedMetric } from '@shopstream/contracts';

/**
 * What a record on `events` cannot do without: its identity, name, times and request, and its metric's name and
 * value. Every other field may be given too.
 */
export type EventRecordFields = Pick<EventRecord, 'activity_id' | 'shop_id' | 'name' | 'event_time' | 'received_at' | 'request_id'> &
  Partial<Omit<EventRecord, 'metric'>> & { metric: Pick<RecordedMetric, 'metric_name' | 'value'> & Partial<RecordedMetric> };

/**
 * A record on `events` (`event-recorded.v1`) as ingest-api writes it for an event that gave nothing optional: no
 * replay key, description, remote id or contact, and a metric with no properties, objects or deduping key. The
 * given fields are set over these, the metric's over the metric's.
 */
export function eventRecordOf({ metric, ...fields }: EventRecordFields): EventRecord {
  return {
    activity_key: null,
    description: null,
    remote_id: null,
    remote_platform: null,
    contact: null,
    ...fields,
    metric: {
      additional_properties: {},
      context_object_id: null,
      context_object_type: null,
      metric_object_id: null,
      metric_object_type: null,
      deduping_key: null,
      ...metric,
    },
  };
}
