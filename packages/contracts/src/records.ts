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

/**
 * A metric and a contact as a projection stored them in jsonb (activities.metric, activities.contact), which keeps
 * keys in its own order, given back in their contract's. The documents were written from validated records:
 * mapped field by field, not validated again.
 */
export const metricInOrder = (m: Record<string, unknown>): RecordedMetric =>
  ({
    metric_name: m.metric_name,
    value: m.value,
    additional_properties: m.additional_properties,
    context_object_id: m.context_object_id,
    context_object_type: m.context_object_type,
    metric_object_id: m.metric_object_id,
    metric_object_type: m.metric_object_type,
    deduping_key: m.deduping_key,
  }) as RecordedMetric;
export const contactInOrder = (c: Record<string, unknown> | null): ResolvedContact | null =>
  c === null ? null : ({ id: c.id, email: c.email, phone: c.phone, remote_id: c.remote_id, name: c.name } as ResolvedContact);

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

/**
 * The personal part of an event with a contact, as it is sealed on `events` since `event-recorded.v2`: the JSON of
 * this object is encrypted under the contact's data key (AES-256-GCM), so that destroying the key erases it from
 * the log (crypto-shredding, docs/privacy.md).
 */
export const sealedEventFieldsSchema = z.object({
  name: z.string().min(1),
  description: z.string().nullable(),
  additional_properties: z.record(z.string(), z.unknown()),
  contact: z.object({ email: z.string().nullable(), phone: z.string().nullable(), remote_id: z.string().nullable(), name: z.string().nullable() }),
});
export type SealedEventFields = z.infer<typeof sealedEventFieldsSchema>;

const base64 = z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/, 'base64');

/**
 * A record's personal fields as they are sealed on a source topic (`events` since event-recorded.v2,
 * `conversations` since conversation-record.v2): AES-256-GCM under the contact's data key (docs/privacy.md).
 */
export const sealedPart = (plaintext: string) =>
  z
    .object({
      alg: z.literal('A256GCM'),
      key_id: z.uuid().describe("The contact's data key; destroyed when the contact is erased."),
      iv: base64.describe('The 96-bit nonce, base64.'),
      data: base64.describe(`base64 of the ciphertext followed by the 128-bit tag; ${plaintext}`),
    })
    .describe("The personal fields, encrypted under the contact's data key (docs/privacy.md).");

/**
 * An event with a contact as ingest-api writes it since `event-recorded.v2`: routing and analytics fields in
 * plaintext, the personal ones (name, description, additional_properties, the contact's identifiers and name)
 * only inside `sealed`.
 */
export const sealedEventRecordSchema = z
  .object({
    activity_id: z.uuid(),
    shop_id: z.uuid(),
    activity_key: z.string().nullable(),
    event_time: rfc3339,
    received_at: rfc3339,
    remote_id: z.string().nullable(),
    remote_platform: z.string().nullable(),
    metric: recordedMetricSchema.omit({ additional_properties: true }),
    contact: z.object({ id: z.uuid() }).describe('Only the contact id: its identifiers are sealed.'),
    request_id: z.string(),
    sealed: sealedPart(
      'the plaintext is the JSON of {name, description, additional_properties, contact: {email, phone, remote_id, name}}, the additional data `<shop_id>/<activity_id>/<contact id>`.',
    ),
  })
  .meta({ id: 'SealedEventRecorded' });
export type SealedEventRecord = z.infer<typeof sealedEventRecordSchema>;

/**
 * Value of a record on `events` since schema `event-recorded.v2`: sealed when the event has a contact, else the
 * v1 form with `contact: null`. Records written before v2 (schema `event-recorded.v1`, plaintext) may still be on
 * the log; the union reads both.
 */
export const storedEventRecordSchema = z.union([sealedEventRecordSchema, eventRecordSchema]).meta({ id: 'EventRecordedV2' });
export type StoredEventRecord = z.infer<typeof storedEventRecordSchema>;

/**
 * storedEventRecordSchema as consumers decode with it: the form is chosen by `sealed` first, so a record that
 * fails says which field of that form failed (a union's error names none).
 */
export const storedEventRecordDecoder = z.unknown().transform((v, ctx): StoredEventRecord => {
  const form = v !== null && typeof v === 'object' && 'sealed' in v ? sealedEventRecordSchema : eventRecordSchema;
  const r = form.safeParse(v);
  if (r.success) return r.data;
  for (const issue of r.error.issues) ctx.issues.push({ code: 'custom', message: issue.message, path: issue.path, input: v });
  return z.NEVER;
});

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
