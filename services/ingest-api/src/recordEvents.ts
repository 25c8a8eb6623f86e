import { BusUnavailableError, PublishAbandonedError, type Bus, type OutgoingRecord } from '@shopstream/bus';
import { eventsTopic, type Contact, type EventAccepted, type EventRecord, type ResolvedContact } from '@shopstream/contracts';
import { ApiError, ClientGone } from '@shopstream/http';
import { contactPersonal, sealEventRecord, sealedPartJson, sealPersonal, type ContactKeys, type DataKey } from '@shopstream/privacy';
import { counter } from '@shopstream/telemetry';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { activityId, activityKey, buildRecord } from '@shopstream/records';
import { parseEvent, type ParsedEvent } from './parseEvent.js';
import { recordTail, type PreparedItem } from './prepareBody.js';
import type { ContactResolver } from './contactResolver.js';
import type { ContactQuery } from './resolveContacts.js';

export interface IngestPorts {
  contacts: ContactResolver;
  /** Where the records go (publish alone: the process's bus, or the large-body producer thread). */
  bus: Pick<Bus, 'publish'>;
  eventsTopic: string;
  /**
   * INGEST_SEND_PART_BYTES: when above 0, a request whose records weigh more is published in parts of about this
   * many bytes, one after the other (each part one send: the producer's other publishes go between them, and no
   * single send encodes megabytes on the event loop). 0: one publish, all or nothing.
   */
  sendPartBytes?: number;
  /** The contacts' data keys the personal fields are sealed with (docs/privacy.md). */
  keys: ContactKeys;
}

export interface IngestRequest {
  shopId: string;
  requestId: string;
  /** When the request arrived: the default event_time, and the record's received_at. */
  receivedAt: Date;
  endpoint: 'single' | 'bulk';
  /**
   * Whether the request's client is gone (its connection closed: it gave up waiting). Asked before the contacts
   * are resolved, before the records are built, and by the producer as it takes them for a send
   * (PublishOptions.abandoned): a request nobody waits for any more is dropped there (ClientGone), so a backlog of
   * them (a process frozen under load, then thawed) costs little and stores nothing no one was told of.
   */
  gone?: () => boolean;
}

export type ItemOutcome =
  { status: 'success'; event: EventAccepted } | { status: 'error'; error: { code: 'validation_error'; message: string; fields: Record<string, string> } };

/** Seconds a client should wait before retrying when the log cannot take writes. */
export const RETRY_AFTER_SECONDS = 5;

const eventsCounter = counter(
  'shopstream_ingest_events_total',
  'Events taken by the ingest API, by endpoint and outcome: accepted (written to the log), duplicate (same key earlier in the same request, not written again), invalid, unavailable (the log could not take it), abandoned (not written: the client closed its connection first).',
  ['endpoint', 'outcome'],
);

/** An item once validated: its field errors, or its activity id, the contact to resolve and its record given the contact. */
type Checked =
  | { ok: false; fields: Record<string, string> }
  | { ok: true; id: string; contact: ContactQuery | undefined; record: (contact: ResolvedContact | null, key: DataKey | undefined) => OutgoingRecord };

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
  const receivedAt = req.receivedAt.toISOString();
  const checked = parsed.map((p): Checked => {
    if (!p.ok) return p;
    const { event } = p;
    const key = activityKey(event);
    const id = activityId(req.shopId, key);
    return {
      ok: true,
      id,
      contact: event.contact as ContactQuery | undefined,
      record: (contact, dataKey) => {
        const built = buildRecord(event, { id, key, contact, shopId: req.shopId, requestId: req.requestId, receivedAt });
        // The one place personal data is sealed before it reaches the log (docs/privacy.md), here and below.
        // `built.contact` is `contact`: narrowed here, not copied (a spread of the record costs as much as sealing it).
        return eventsTopic.record(contact && dataKey ? sealEventRecord(dataKey, built as EventRecord & { contact: ResolvedContact }) : built);
      },
    };
  });
  return recordChecked(ports, req, checked, slice);
}

/**
 * Records the events of a body prepared off the event loop (prepareBody.ts), as recordEvents does: each record's
 * JSON up to its contact came from the worker; the contact, resolved here, and the request id are appended.
 */
export async function recordPrepared(ports: IngestPorts, req: IngestRequest, items: PreparedItem[], heads: ArrayBuffer): Promise<ItemOutcome[]> {
  const bytes = Buffer.from(heads);
  const tail = recordTail(req.requestId);
  // The envelope's headers depend on the shop alone (content-type, schema, shop_id), as eventsTopic.record's.
  const headers = eventsTopic.recordHeaders({ shop_id: req.shopId } as EventRecord);
  const checked = items.map((p): Checked => {
    if (!p.ok) return p;
    const head = bytes.subarray(p.at, p.at + p.length);
    return {
      ok: true,
      id: p.id,
      contact: p.contact,
      record: (contact, dataKey) => {
        if (p.personal === undefined) {
          return { key: req.shopId, value: Buffer.concat([head, Buffer.from(JSON.stringify(contact) + tail)]), headers };
        }
        // `head` is the plain part (prepareBody: splitPersonal), `personal` the personal fields' JSON up to the contact.
        if (!contact || !dataKey) throw new Error(`event ${p.id}: a contact to seal its personal fields under was not resolved`);
        const personal = Buffer.concat([
          bytes.subarray(p.personal.at, p.personal.at + p.personal.length),
          Buffer.from(`${JSON.stringify(contactPersonal(contact))}}`),
        ]);
        const sealed = sealPersonal(dataKey, { shopId: req.shopId, activityId: p.id, contactId: contact.id }, personal);
        return {
          key: req.shopId,
          value: Buffer.concat([head, Buffer.from(`${JSON.stringify({ id: contact.id })},"sealed":${sealedPartJson(sealed)}${tail}`)]),
          headers,
        };
      },
    };
  });
  // Shorter turns than the event-loop path's: sealing one large record takes about a tenth of a millisecond, and
  // a small request waiting behind a bulk's records waits at most a turn.
  return recordChecked(ports, req, checked, timeSlicer(PREPARED_SLICE_MS));
}

async function recordChecked(ports: IngestPorts, req: IngestRequest, checked: Checked[], slice: () => Promise<void> | undefined): Promise<ItemOutcome[]> {
  const valid: { index: number; item: Extract<Checked, { ok: true }> }[] = [];
  checked.forEach((item, index) => {
    if (item.ok) valid.push({ index, item });
  });

  const invalidCount = checked.length - valid.length;
  const abandon = (): ClientGone => {
    eventsCounter.inc({ endpoint: req.endpoint, outcome: 'abandoned' }, valid.length);
    if (invalidCount > 0) eventsCounter.inc({ endpoint: req.endpoint, outcome: 'invalid' }, invalidCount);
    return new ClientGone();
  };
  if (req.gone?.()) throw abandon();

  const withContact = valid.filter((v) => v.item.contact !== undefined);
  const resolved = new Map<number, ResolvedContact>();
  if (withContact.length > 0) {
    const contacts = await ports.contacts.resolve(
      req.shopId,
      withContact.map((v) => v.item.contact!),
    );
    withContact.forEach((v, i) => resolved.set(v.index, contacts[i]));
  }
  // The data keys of the contacts, made for those new to it (one batch across concurrent requests).
  const dataKeys =
    resolved.size > 0
      ? await ports.keys.forContacts(
          req.shopId,
          [...resolved.values()].map((c) => c.id),
        )
      : undefined;

  // Asked again before the records are built and sealed: resolving the contacts waited (on the database, on other
  // requests' look-ups). The producer asks a last time as it takes them for a send.
  if (req.gone?.()) throw abandon();

  const accepted = new Map<number, EventAccepted>();
  const published = new Set<string>();
  const records: OutgoingRecord[] = [];
  for (const { index, item } of valid) {
    const { id } = item;
    const contact = resolved.get(index) ?? null;
    accepted.set(index, contact ? { activity_id: id, contact: responseContact(contact) } : { activity_id: id });
    // The same key twice in one request: one Activity, so one record; the first one wins, as across requests.
    if (published.has(id)) continue;
    published.add(id);
    const dataKey = contact ? dataKeys?.get(contact.id) : undefined;
    // Never a contact's personal fields in plaintext on the log: no key, no record.
    if (contact && !dataKey) throw new Error(`no data key for contact ${contact.id}`);
    records.push(item.record(contact, dataKey));
    await slice();
  }

  const parts = partsOf(records, ports.sendPartBytes ?? 0);
  let sent = 0;
  try {
    for (const part of parts) {
      // Asked once more by the producer, as it takes the records for a send (the first part only).
      await ports.bus.publish(ports.eventsTopic, part, sent === 0 && req.gone ? { abandoned: req.gone } : undefined);
      sent++;
    }
  } catch (e) {
    if (e instanceof PublishAbandonedError) throw abandon();
    if (!(e instanceof BusUnavailableError)) throw e;
    eventsCounter.inc({ endpoint: req.endpoint, outcome: 'unavailable' }, valid.length);
    if (invalidCount > 0) eventsCounter.inc({ endpoint: req.endpoint, outcome: 'invalid' }, invalidCount);
    throw new ApiError(
      'unavailable',
      sent === 0
        ? 'The event log cannot take writes right now; no event of this request was accepted. Retry after the Retry-After seconds (events with a remote_id or deduping_key are never recorded twice).'
        : 'The event log stopped taking writes part way through this large request: some of its events may have been recorded. Retry after the Retry-After seconds (events with a remote_id or deduping_key are never recorded twice).',
      {},
      { 'Retry-After': String(RETRY_AFTER_SECONDS) },
    );
  }
  if (records.length > 0) eventsCounter.inc({ endpoint: req.endpoint, outcome: 'accepted' }, records.length);
  if (valid.length > records.length) eventsCounter.inc({ endpoint: req.endpoint, outcome: 'duplicate' }, valid.length - records.length);
  if (invalidCount > 0) eventsCounter.inc({ endpoint: req.endpoint, outcome: 'invalid' }, invalidCount);

  return checked.map((p, index): ItemOutcome => {
    if (!p.ok) return { status: 'error', error: { code: 'validation_error', message: 'The event is not valid.', fields: p.fields } };
    return { status: 'success', event: accepted.get(index)! };
  });
}

/** The records in order, in parts of about `maxBytes` of values each (one part when 0 or when they weigh less). */
function partsOf(records: OutgoingRecord[], maxBytes: number): OutgoingRecord[][] {
  if (maxBytes <= 0) return [records];
  const parts: OutgoingRecord[][] = [];
  let part: OutgoingRecord[] = [];
  let bytes = 0;
  for (const r of records) {
    const size = typeof r.value === 'string' ? Buffer.byteLength(r.value) : r.value.length;
    if (part.length > 0 && bytes + size > maxBytes) {
      parts.push(part);
      part = [];
      bytes = 0;
    }
    part.push(r);
    bytes += size;
  }
  parts.push(part);
  return parts;
}

/** How long the items of one request may hold the event loop before letting other requests run. */
const SLICE_MS = 10;
/** The same for a large body's records (prepared in a worker), which the event loop only seals and assembles. */
const PREPARED_SLICE_MS = 2;

/**
 * A function to await between items: it yields to the event loop once `sliceMs` have passed since the last
 * yield, so validating and serialising 100 large events does not keep every other request waiting; a request
 * of small events (nearly all) never yields and pays one clock read per item.
 */
function timeSlicer(sliceMs = SLICE_MS): () => Promise<void> | undefined {
  let since = performance.now();
  return () => {
    if (performance.now() - since < sliceMs) return undefined;
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
