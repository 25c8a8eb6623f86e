import type { ValidRecord } from '@shopstream/projections';
import {
  sealedEventFieldsSchema,
  type EventRecord,
  type ResolvedContact,
  type SealedEventFields,
  type SealedEventRecord,
  type StoredEventRecord,
} from '@shopstream/contracts';
import { counter } from '@shopstream/telemetry';
import type { Queryable } from '@shopstream/db';
import { open, seal } from './aead.js';
import { contactStates, type ContactKeys, type ContactStates, type DataKey, type KeyCache } from './dataKeys.js';

export const erasedRecords = counter(
  'shopstream_privacy_erased_records_total',
  'Records a projector applied as erased: their contact was erased (key destroyed or contact in erased_contacts), or their sealed part did not open.',
  ['reason'],
);

/** What a sealed value is bound to: it opens only in its own record, for its own contact. */
const sealAad = (shopId: string, activityId: string, contactId: string) => `${shopId}/${activityId}/${contactId}`;

/** The sealed part of a record, as it is written: the algorithm, the data key's id, the nonce and the ciphertext. */
type SealedPart = SealedEventRecord['sealed'];

/** Seals the JSON of a record's personal fields under its contact's data key, bound to that record and contact. */
export function sealPersonal(k: DataKey, ids: { shopId: string; activityId: string; contactId: string }, personal: Buffer | string): SealedPart {
  const s = seal(k.key, personal, sealAad(ids.shopId, ids.activityId, ids.contactId));
  return { alg: 'A256GCM', key_id: k.keyId, iv: s.iv, data: s.data };
}

/**
 * The sealed part's JSON, as JSON.stringify writes it, written out: its values are the algorithm's name, a uuid
 * and base64 (nothing to escape), and for a large record JSON.stringify's scan of the ciphertext cost as much as
 * sealing it (about 115 µs of a 55 KB part's 220).
 */
export const sealedPartJson = (s: SealedPart): string => `{"alg":"${s.alg}","key_id":"${s.key_id}","iv":"${s.iv}","data":"${s.data}"}`;

/**
 * What sealing splits a record into, serialised by whoever holds it (ingest's body worker writes the JSON
 * without the contact, which the main thread resolves): the plain record without the personal fields, and the
 * personal fields, the contact's identifiers and name among them.
 */
export function splitPersonal(r: EventRecord): {
  plain: Omit<EventRecord, 'name' | 'description' | 'contact' | 'metric'> & { metric: Omit<EventRecord['metric'], 'additional_properties'> };
  personal: Omit<SealedEventFields, 'contact'>;
} {
  const { name, description, contact: _contact, metric, ...rest } = r;
  const { additional_properties, ...metricPlain } = metric;
  return { plain: { ...rest, metric: metricPlain }, personal: { name, description, additional_properties } };
}

/** The personal fields of a contact, as sealed: its identifiers and name. */
export const contactPersonal = (c: ResolvedContact): SealedEventFields['contact'] => ({
  email: c.email,
  phone: c.phone,
  remote_id: c.remote_id,
  name: c.name,
});

/**
 * One record with a contact, its personal fields sealed under the contact's data key `k`. Built field by field
 * (splitPersonal's rest and spread copies cost as much as the AES-GCM call), in the order the spread gave them.
 */
export function sealEventRecord(k: DataKey, r: EventRecord & { contact: ResolvedContact }): SealedEventRecord {
  const { metric: m, contact: c } = r;
  const fields: SealedEventFields = {
    name: r.name,
    description: r.description,
    additional_properties: m.additional_properties,
    contact: { email: c.email, phone: c.phone, remote_id: c.remote_id, name: c.name },
  };
  return {
    activity_id: r.activity_id,
    shop_id: r.shop_id,
    activity_key: r.activity_key,
    event_time: r.event_time,
    received_at: r.received_at,
    remote_id: r.remote_id,
    remote_platform: r.remote_platform,
    request_id: r.request_id,
    metric: {
      metric_name: m.metric_name,
      value: m.value,
      context_object_id: m.context_object_id,
      context_object_type: m.context_object_type,
      metric_object_id: m.metric_object_id,
      metric_object_type: m.metric_object_type,
      deduping_key: m.deduping_key,
    },
    contact: { id: c.id },
    sealed: sealPersonal(k, { shopId: r.shop_id, activityId: r.activity_id, contactId: c.id }, JSON.stringify(fields)),
  };
}

/**
 * The values ingest writes to `events` (event-recorded.v2) for the records it built, in order: an event with a
 * contact has its personal fields (name, description, additional_properties, the contact's identifiers and name)
 * sealed under the contact's data key; one without a contact is written as it is. All of one shop.
 */
export async function sealEventRecords(keys: ContactKeys, shopId: string, records: EventRecord[]): Promise<StoredEventRecord[]> {
  const contactIds: string[] = [];
  for (const r of records) if (r.contact) contactIds.push(r.contact.id);
  if (contactIds.length === 0) return records;
  const dataKeys = await keys.forContacts(shopId, contactIds);
  return records.map((r): StoredEventRecord => (r.contact ? sealEventRecord(dataKeys.get(r.contact.id)!, r as EventRecord & { contact: ResolvedContact }) : r));
}

const isSealed = (v: StoredEventRecord): v is SealedEventRecord => 'sealed' in v;

const nullableString = (x: unknown) => x === null || typeof x === 'string';
const isObject = (x: unknown): x is Record<string, unknown> => x !== null && typeof x === 'object' && !Array.isArray(x);

/**
 * The opened personal part, checked by its shape. Not a zod parse: the part opened under the contact's key, so
 * GCM's tag already proved that Shopstream's writer made it (a parse cost a third of what opening a record costs);
 * zod (sealedEventFieldsSchema) runs only on a part of the wrong shape, to say what is wrong.
 */
function personalFields(x: unknown): SealedEventFields {
  if (
    isObject(x) &&
    typeof x.name === 'string' &&
    x.name.length > 0 &&
    nullableString(x.description) &&
    isObject(x.additional_properties) &&
    isObject(x.contact) &&
    nullableString(x.contact.email) &&
    nullableString(x.contact.phone) &&
    nullableString(x.contact.remote_id) &&
    nullableString(x.contact.name)
  ) {
    return x as SealedEventFields;
  }
  return sealedEventFieldsSchema.parse(x);
}

/**
 * The `events` records a projector applies, opened: a sealed record whose contact's key is live comes back as
 * the plaintext record ingest built; a record of an erased contact (its key destroyed, or, for a plaintext
 * record written before v2, the contact in erased_contacts) is left out: applied as erased. Reads the keys in the
 * caller's transaction (contactStates), so an erasure in flight is waited for.
 */
export async function openEventRecords(
  tx: Queryable,
  cache: KeyCache,
  records: ValidRecord<StoredEventRecord>[],
  log: { error(obj: object, msg: string): void },
): Promise<ValidRecord<EventRecord>[]> {
  const refs = records.flatMap(({ value: v }) => (v.contact ? [{ shop_id: v.shop_id, contact_id: v.contact.id }] : []));
  return openEventRecordsWith(await contactStates(tx, cache, refs), records, log);
}

/** openEventRecords once the states of the records' contacts are read. */
export function openEventRecordsWith(
  states: ContactStates,
  records: ValidRecord<StoredEventRecord>[],
  log: { error(obj: object, msg: string): void },
): ValidRecord<EventRecord>[] {
  const out: ValidRecord<EventRecord>[] = [];
  for (const { record, value: v } of records) {
    if (!v.contact) {
      out.push({ record, value: v as EventRecord });
      continue;
    }
    if (states.erased(v.shop_id, v.contact.id)) {
      erasedRecords.inc({ reason: 'erased' });
      continue;
    }
    if (!isSealed(v)) {
      out.push({ record, value: v });
      continue;
    }
    const k = states.key(v.shop_id, v.contact.id);
    if (!k || k.keyId !== v.sealed.key_id) {
      erasedRecords.inc({ reason: 'no_key' });
      continue;
    }
    let personal: SealedEventFields;
    try {
      personal = personalFields(JSON.parse(open(k.key, v.sealed, sealAad(v.shop_id, v.activity_id, v.contact.id)).toString('utf8')));
    } catch (e) {
      // Not a crash of the projector (the partition would stop): the record is counted, logged and skipped.
      erasedRecords.inc({ reason: 'unopenable' });
      log.error({ err: e, partition: record.partition, offset: record.offset }, 'an events record did not open under its contact key: skipped');
      continue;
    }
    // Field by field, as ingest built it (a rest and spread copy of the record cost a third of opening it).
    const { metric: m } = v;
    const c = personal.contact;
    out.push({
      record,
      value: {
        activity_id: v.activity_id,
        shop_id: v.shop_id,
        activity_key: v.activity_key,
        name: personal.name,
        description: personal.description,
        event_time: v.event_time,
        received_at: v.received_at,
        remote_id: v.remote_id,
        remote_platform: v.remote_platform,
        metric: {
          metric_name: m.metric_name,
          value: m.value,
          additional_properties: personal.additional_properties,
          context_object_id: m.context_object_id,
          context_object_type: m.context_object_type,
          metric_object_id: m.metric_object_id,
          metric_object_type: m.metric_object_type,
          deduping_key: m.deduping_key,
        },
        contact: { id: v.contact.id, email: c.email, phone: c.phone, remote_id: c.remote_id, name: c.name },
        request_id: v.request_id,
      },
    });
  }
  return out;
}
