import { z } from 'zod';
import { rfc3339 } from './events.js';

/** A contact as resolved at ingest: every identifier it has, null where it has none. */
export const resolvedContactSchema = z
  .object({
    id: z.uuid(),
    email: z.string().nullable(),
    phone: z.string().nullable(),
    remote_id: z.string().nullable(),
    name: z.string().nullable(),
  })
  .meta({ id: 'ResolvedContact' });
export type ResolvedContact = z.infer<typeof resolvedContactSchema>;

const metricFields = {
  metric_name: z.string().min(1),
  value: z.number().nullable(),
  additional_properties: z.record(z.string(), z.unknown()),
  context_object_id: z.uuid().nullable(),
  context_object_type: z.string().nullable(),
  metric_object_id: z.uuid().nullable(),
  metric_object_type: z.string().nullable(),
  deduping_key: z.string().nullable(),
};

/**
 * The identity of a record a projector derives: `id`, the same whenever the projector produces the record
 * again (a consumer deduplicates the rare repeat after a crash by it), and the shop it belongs to.
 */
const derivedRecordIdentity = {
  id: z.uuid(),
  shop_id: z.uuid(),
};

export const recordedMetricSchema = z.object(metricFields).meta({ id: 'RecordedMetric' });
export type RecordedMetric = z.infer<typeof recordedMetricSchema>;

/** Value of a record on `events` (schema `event-recorded.v1`), written by ingest-api. */
export const eventRecordSchema = z
  .object({
    activity_id: z.uuid(),
    shop_id: z.uuid(),
    /** The replay key the activity id was derived from, or null for an unkeyed event. */
    activity_key: z.string().nullable(),
    name: z.string().min(1),
    description: z.string().nullable(),
    event_time: rfc3339,
    received_at: rfc3339,
    remote_id: z.string().nullable(),
    remote_platform: z.string().nullable(),
    metric: recordedMetricSchema,
    contact: resolvedContactSchema.nullable(),
    request_id: z.string(),
  })
  .meta({ id: 'EventRecorded' });
export type EventRecord = z.infer<typeof eventRecordSchema>;

/** Value of a record on `metrics` (schema `metric-event.v1`): one per new Activity. `id` equals the activity id. */
export const metricEventSchema = z
  .object({
    ...derivedRecordIdentity,
    activity_id: z.uuid(),
    ...metricFields,
    name: z.string(),
    description: z.string().nullable(),
    event_time: rfc3339,
    recorded_at: rfc3339,
    contact: resolvedContactSchema.nullable(),
    remote_id: z.string().nullable(),
    remote_platform: z.string().nullable(),
  })
  .meta({ id: 'MetricEvent' });
export type MetricEvent = z.infer<typeof metricEventSchema>;

/** Value of a record on `flow-triggers` (schema `flow-triggered.v1`): one per (flow, metric event); `id` is UUIDv5 of both. */
export const flowTriggerRecordSchema = z
  .object({
    ...derivedRecordIdentity,
    flow_id: z.uuid(),
    metric_event_id: z.uuid(),
    activity_id: z.uuid(),
    contact_id: z.uuid().nullable(),
    metric_name: z.string(),
    matched_at: rfc3339,
  })
  .meta({ id: 'FlowTriggered' });
export type FlowTriggerRecord = z.infer<typeof flowTriggerRecordSchema>;
