import type { ValidRecord } from '@shopstream/bus';
import { sealedEventFieldsSchema, type EventRecord, type SealedEventFields, type SealedEventRecord, type StoredEventRecord } from '@shopstream/contracts';
import { counter } from '@shopstream/telemetry';
import type { Queryable } from '@shopstream/db';
import { open, seal } from './aead.js';
import { contactStates, type ContactKeys, type KeyCache } from './dataKeys.js';

const erasedRecords = counter(
  'shopstream_privacy_erased_records_total',
  'Records a projector applied as erased: their contact was erased (key destroyed or contact in erased_contacts), or their sealed part did not open.',
  ['reason'],
);

/** What a sealed value is bound to: it opens only in its own record, for its own contact. */
const sealAad = (shopId: string, activityId: string, contactId: string) => `${shopId}/${activityId}/${contactId}`;

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
  return records.map((r): StoredEventRecord => {
    if (!r.contact) return r;
    const { name, description, contact, metric, ...plain } = r;
    const { additional_properties, ...metricPlain } = metric;
    const personal: SealedEventFields = {
      name,
      description,
      additional_properties,
      contact: { email: contact.email, phone: contact.phone, remote_id: contact.remote_id, name: contact.name },
    };
    const k = dataKeys.get(contact.id)!;
    const s = seal(k.key, JSON.stringify(personal), sealAad(r.shop_id, r.activity_id, contact.id));
    const sealed: SealedEventRecord = {
      ...plain,
      metric: metricPlain,
      contact: { id: contact.id },
      sealed: { alg: 'A256GCM', key_id: k.keyId, iv: s.iv, data: s.data },
    };
    return sealed;
  });
}

const isSealed = (v: StoredEventRecord): v is SealedEventRecord => 'sealed' in v;

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
  const states = await contactStates(tx, cache, refs);
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
      personal = sealedEventFieldsSchema.parse(JSON.parse(open(k.key, v.sealed, sealAad(v.shop_id, v.activity_id, v.contact.id)).toString('utf8')));
    } catch (e) {
      // Not a crash of the projector (the partition would stop): the record is counted, logged and skipped.
      erasedRecords.inc({ reason: 'unopenable' });
      log.error({ err: e, partition: record.partition, offset: record.offset }, 'an events record did not open under its contact key: skipped');
      continue;
    }
    const { sealed: _s, metric, contact, ...plain } = v;
    out.push({
      record,
      value: {
        ...plain,
        name: personal.name,
        description: personal.description,
        metric: { ...metric, additional_properties: personal.additional_properties },
        contact: { id: contact.id, ...personal.contact },
      },
    });
  }
  return out;
}
