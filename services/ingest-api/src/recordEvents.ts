import { BusUnavailableError, type Bus, type OutgoingRecord } from '@shopstream/bus';
import { eventsTopic, type Contact, type EventAccepted, type EventInput, type EventRecord, type ResolvedContact } from '@shopstream/contracts';
import { ApiError } from '@shopstream/http';
import { sealEventRecords, type ContactKeys } from '@shopstream/privacy';
import { counter } from '@shopstream/telemetry';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { activityId, activityKey } from './activityId.js';
import { parseEvent, type ParsedEvent } from './parseEvent.js';
import type { ContactResolver } from './contactResolver.js';
import type { ContactQuery } from './resolveContacts.js';

export interface IngestPorts {
  contacts: ContactResolver;
  bus: Bus;
  eventsTopic: string;
  /** The contacts' data keys the personal fields are sealed with (docs/privacy.md). */
  keys: ContactKeys;
}

export interface IngestRequest {
  shopId: string;
  requestId: string;
  /** When the request arrived: the default event_time, and the record's received_at. */
  receivedAt: Date;
  endpoint: 'single' | 'bulk';
}

export type ItemOutcome =
  { status: 'success'; event: EventAccepted } | { status: 'error'; error: { code: 'validation_error'; message: string; fields: Record<string, string> } };

/** Seconds a client should wait before retrying when the log cannot take writes. */
export const RETRY_AFTER_SECONDS = 5;

const eventsCounter = counter(
  'shopstream_ingest_events_total',
  'Events taken by the ingest API, by endpoint and outcome: accepted (written to the log), duplicate (same key earlier in the same request, not written again), invalid, unavailable (the log could not take it).',
  ['endpoint', 'outcome'],
);

/**
 * Records events: validates each one alone, resolves the contacts of the valid ones (one batch for the
 * whole list; no database work when none carries a contact), writes one `events` record per distinct
 * activity, and answers per item in order. Throws ApiError `unavailable` (503, Retry-After) when the log
 * did not take the records: then no item was accepted.
 */
export async function recordEvents(ports: IngestPorts, req: IngestRequest, items: unknown[]): Promise<ItemOutcome[]> {
  const slice = timeSlicer();
  const parsed: ParsedEvent[] = [];
  for (const item of items) {
    parsed.push(parseEvent(item));
    await slice();
  }
  const valid: { index: number; event: EventInput }[] = [];
  parsed.forEach((p, index) => {
    if (p.ok) valid.push({ index, event: p.event });
  });

  const withContact = valid.filter((v) => v.event.contact !== undefined);
  const resolved = new Map<number, ResolvedContact>();
  if (withContact.length > 0) {
    const contacts = await ports.contacts.resolve(
      req.shopId,
      withContact.map((v) => v.event.contact as ContactQuery),
    );
    withContact.forEach((v, i) => resolved.set(v.index, contacts[i]));
  }

  const receivedAt = req.receivedAt.toISOString();
  const accepted = new Map<number, EventAccepted>();
  const published = new Set<string>();
  const values: EventRecord[] = [];
  for (const { index, event } of valid) {
    const key = activityKey(event);
    const id = activityId(req.shopId, key);
    const contact = resolved.get(index) ?? null;
    accepted.set(index, contact ? { activity_id: id, contact: responseContact(contact) } : { activity_id: id });
    // The same key twice in one request: one Activity, so one record; the first one wins, as across requests.
    if (published.has(id)) continue;
    published.add(id);
    values.push(buildRecord(event, { id, key, contact, shopId: req.shopId, requestId: req.requestId, receivedAt }));
    await slice();
  }
  // The one place personal data is sealed before it reaches the log: the values as they go on `events`.
  const records: OutgoingRecord[] = (await sealEventRecords(ports.keys, req.shopId, values)).map((v) => eventsTopic.record(v));

  const invalidCount = items.length - valid.length;
  try {
    await ports.bus.publish(ports.eventsTopic, records);
  } catch (e) {
    if (!(e instanceof BusUnavailableError)) throw e;
    eventsCounter.inc({ endpoint: req.endpoint, outcome: 'unavailable' }, valid.length);
    if (invalidCount > 0) eventsCounter.inc({ endpoint: req.endpoint, outcome: 'invalid' }, invalidCount);
    throw new ApiError(
      'unavailable',
      'The event log cannot take writes right now; no event of this request was accepted. Retry after the Retry-After seconds (events with a remote_id or deduping_key are never recorded twice).',
      {},
      { 'Retry-After': String(RETRY_AFTER_SECONDS) },
    );
  }
  if (records.length > 0) eventsCounter.inc({ endpoint: req.endpoint, outcome: 'accepted' }, records.length);
  if (valid.length > records.length) eventsCounter.inc({ endpoint: req.endpoint, outcome: 'duplicate' }, valid.length - records.length);
  if (invalidCount > 0) eventsCounter.inc({ endpoint: req.endpoint, outcome: 'invalid' }, invalidCount);

  return parsed.map((p, index): ItemOutcome => {
    if (!p.ok) return { status: 'error', error: { code: 'validation_error', message: 'The event is not valid.', fields: p.fields } };
    return { status: 'success', event: accepted.get(index)! };
  });
}

/** How long the items of one request may hold the event loop before letting other requests run. */
const SLICE_MS = 10;

/**
 * A function to await between items: it yields to the event loop once SLICE_MS have passed since the last
 * yield, so validating and serialising 100 large events does not keep every other request waiting; a request
 * of small events (nearly all) never yields and pays one clock read per item.
 */
function timeSlicer(): () => Promise<void> | undefined {
  let since = performance.now();
  return () => {
    if (performance.now() - since < SLICE_MS) return undefined;
    return nextTurn().then(() => {
      since = performance.now();
    });
  };
}

/** The contact as the API answers it: its id and the identifiers it has, absent ones omitted. */
export function responseContact(c: ResolvedContact): Contact {
  return {
    id: c.id,
    ...(c.email !== null ? { email: c.email } : {}),
    ...(c.phone !== null ? { phone: c.phone } : {}),
    ...(c.remote_id !== null ? { remote_id: c.remote_id } : {}),
  };
}

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
