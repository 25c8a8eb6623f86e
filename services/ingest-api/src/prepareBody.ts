import { bulkRequestSchema, fieldErrors, type EventRecord } from '@shopstream/contracts';
import { splitPersonal } from '@shopstream/privacy';
import { activityId, activityKey, buildRecord } from '@shopstream/records';
import { parseEvent } from './parseEvent.js';
import type { ContactQuery } from './resolveContacts.js';

/** A large body to prepare off the event loop: its bytes as read, and what its records carry. */
export interface BodyTask {
  bytes: Uint8Array;
  endpoint: 'single' | 'bulk';
  shopId: string;
  requestId: string;
  /** ISO 8601: the default event_time and the records' received_at. */
  receivedAt: string;
}

/**
 * One item of a prepared body: its field errors, or its activity id, the contact to resolve, and where its
 * record's JSON up to `"contact":` lies in `heads` (the contact and `request_id` follow: see recordTail).
 */
export type PreparedItem =
  | { ok: false; fields: Record<string, string> }
  | {
      ok: true;
      id: string;
      contact?: ContactQuery;
      at: number;
      length: number;
      /**
       * With a contact: `heads` holds the plain part of the record (without its personal fields), and here lies
       * the JSON of those personal fields up to `"contact":`, which the main thread completes and seals under the
       * contact's data key (docs/privacy.md).
       */
      personal?: { at: number; length: number };
    };

/** What the main thread needs of a large body: a few small values per item and one buffer of record bytes. */
export type PreparedBody =
  | { kind: 'invalid_json' }
  /** The bulk body is not `{events: [1..100 items]}`: the 400 of `validate(bulkRequestSchema, …)`. */
  | { kind: 'invalid'; message: string; fields: Record<string, string> }
  | { kind: 'items'; items: PreparedItem[]; heads: ArrayBuffer };

/** The end of an `events` record's JSON after `"contact":`, as JSON.stringify writes buildRecord's value. */
export const recordTail = (requestId: string): string => `,"request_id":${JSON.stringify(requestId)}}`;

const CONTACT_KEY = '"contact":';

/** The JSON without its end `tail`, checked to end with `"contact":` and that tail. */
function withoutTail(json: string, tail: string): string {
  if (!json.endsWith(CONTACT_KEY + tail)) throw new Error('an events record does not end with its contact and request_id');
  return json.slice(0, json.length - tail.length);
}

/** A record to be sealed, its keys in the sealed form's order: the plain part, then `contact` and `request_id` last. */
function sealedLayout(r: EventRecord): object {
  const { request_id, ...plain } = splitPersonal(r).plain;
  return { ...plain, contact: null, request_id };
}

/**
 * Does what the main thread does to a small body, from the bytes to the records' JSON: decodes them as
 * body-parser does (UTF-8, a BOM dropped, an empty body is `{}`), JSON.parse, the bulk body's outer shape, each
 * event's validation and normalisation (parseEvent), its activity key and id, and its record serialised with
 * the contact left out. Runs in a worker thread (bodyWorker.ts): only small values and one buffer go back.
 */
export function prepareBody(task: BodyTask): PreparedBody {
  const b = Buffer.from(task.bytes.buffer, task.bytes.byteOffset, task.bytes.byteLength);
  const bom = b.length >= 3 && b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf ? 3 : 0;
  const text = b.toString('utf8', bom);
  let body: unknown;
  try {
    body = text.length === 0 ? {} : JSON.parse(text);
  } catch {
    return { kind: 'invalid_json' };
  }
  let events: unknown[];
  if (task.endpoint === 'single') events = [body];
  else {
    const r = bulkRequestSchema.safeParse(body);
    if (!r.success) return { kind: 'invalid', message: 'The request body is not valid.', fields: fieldErrors(r.error) };
    events = r.data.events;
  }
  const tail = `null${recordTail(task.requestId)}`;
  const heads: string[] = [];
  const items: PreparedItem[] = [];
  let at = 0;
  for (const input of events) {
    const p = parseEvent(input);
    if (!p.ok) {
      items.push({ ok: false, fields: p.fields });
      continue;
    }
    const key = activityKey(p.event);
    const id = activityId(task.shopId, key);
    const built = buildRecord(p.event, { id, key, contact: null, shopId: task.shopId, requestId: task.requestId, receivedAt: task.receivedAt });
    const start = at;
    const head = withoutTail(JSON.stringify(p.event.contact ? sealedLayout(built) : built), tail);
    const length = Buffer.byteLength(head);
    heads.push(head);
    at += length;
    let personal: { at: number; length: number } | undefined;
    if (p.event.contact) {
      // The personal fields' JSON with the contact last and left out: `null}` is what the main thread replaces.
      const fields = withoutTail(JSON.stringify({ ...splitPersonal(built).personal, contact: null }), 'null}');
      personal = { at, length: Buffer.byteLength(fields) };
      heads.push(fields);
      at += personal.length;
    }
    items.push({
      ok: true,
      id,
      ...(p.event.contact ? { contact: p.event.contact as ContactQuery } : {}),
      at: start,
      length,
      ...(personal ? { personal } : {}),
    });
  }
  // A buffer of its own (not a slice of the pool), so it can be transferred rather than copied.
  const out = Buffer.allocUnsafeSlow(at);
  let o = 0;
  for (const h of heads) o += out.write(h, o);
  return { kind: 'items', items, heads: out.buffer as ArrayBuffer };
}
