/**
 * What sealing costs per record, apart from Kafka, PostgreSQL and HTTP (issue 24): a few seconds of CPU in one
 * process, no infrastructure. Run it under `nice -n 19`:
 *
 *   nice -n 19 pnpm -s tsx --conditions=@shopstream/source bench/src/sealCost.ts [--records 4000] [--rounds 9]
 *
 * The bench's realistic events (events.ts), those with a contact, each contact new (the worst case for keys, as
 * in `pnpm bench`). Each round times every step once over the same records, alternating, and the medians are
 * printed as CPU microseconds per record (per key for the key steps) and as a ratio to the same run's baseline
 * without encryption: for ingest, the record serialised as it is published (`eventsTopic.record`); for the
 * projector, the record decoded as the projection runner decodes it (UTF-8, JSON.parse, the topic's schema). The
 * machine is shared: compare ratios between runs, not microseconds.
 */
import { parseArgs } from 'node:util';
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { eventsTopic, type EventRecord, type ResolvedContact, type StoredEventRecord } from '@shopstream/contracts';
import type { BusRecord } from '@shopstream/bus';
import type { ValidRecord } from '@shopstream/projections';
import { KeyCache, keyringOf, makeDataKeys, openEventRecordsWith, sealEventRecord, type ContactStates, type DataKey } from '@shopstream/privacy';
import { eventMaker, eventRecordOf } from './events.js';

const { values } = parseArgs({ options: { records: { type: 'string', default: '4000' }, rounds: { type: 'string', default: '9' } } });
const RECORDS = Number(values.records);
const ROUNDS = Number(values.rounds);

type WithContact = EventRecord & { contact: ResolvedContact };
const SHOPS = ['0b8f4a8e-1c7e-4f7e-9a51-3f3f1c9d0001', '0b8f4a8e-1c7e-4f7e-9a51-3f3f1c9d0002', '0b8f4a8e-1c7e-4f7e-9a51-3f3f1c9d0003'];
const makers = SHOPS.map((shop, i) => ({ shop, maker: eventMaker({ seed: `seal-cost-${i}` }) }));
const records: WithContact[] = [];
for (let n = 0; records.length < RECORDS; n++) {
  const { shop, maker } = makers[n % makers.length];
  const r = eventRecordOf(shop, maker.event(), `req-${n}`);
  if (r.contact) records.push(r as WithContact);
}

const keyring = keyringOf([randomBytes(32)]);
const contactKey = (r: { shop_id: string; contact: { id: string } }) => `${r.shop_id}/${r.contact.id}`;
const pairs = [...new Map(records.map((r) => [contactKey(r), { shop: r.shop_id, contact: r.contact.id }])).values()];
const made = makeDataKeys(keyring, pairs);
const keys = new Map<string, DataKey>(made.map((m) => [`${m.shop}/${m.contact}`, { keyId: m.keyId, key: m.key }]));
const rows = made.map((m) => ({ shop_id: m.shop, contact_id: m.contact, key_id: m.keyId, master_id: m.masterId, wrapped: m.wrapped }));

// What the projector reads: the bytes of each record on `events`, sealed and as before sealing.
const busRecord = (value: string, offset: number): BusRecord => ({
  topic: 'events',
  partition: 0,
  offset: String(offset),
  key: null,
  value: Buffer.from(value),
  headers: {},
  timestamp: 0,
});
const plainBytes = records.map((r, i) => busRecord(eventsTopic.record(r).value as string, i));
const sealedBytes = records.map((r, i) => busRecord(eventsTopic.record(sealEventRecord(keys.get(contactKey(r))!, r)).value as string, i));
const states: ContactStates = { key: (shop, contact) => keys.get(`${shop}/${contact}`), erased: () => false };
const decode = (b: BusRecord): ValidRecord<StoredEventRecord> => ({ record: b, value: eventsTopic.schema.parse(JSON.parse(b.value.toString('utf8'))) });
const log = { error: (o: object, msg: string) => console.error(msg, o) };

// The floor: node:crypto's AES-256-GCM alone on the same sizes (the personal part's JSON, its additional data),
// a cipher object per value as every seal and open needs (a nonce per value; node:crypto cannot re-key one).
const personal = records.map((r) => {
  const c = r.contact;
  const fields = { name: r.name, description: r.description, additional_properties: r.metric.additional_properties, contact: c };
  return { text: JSON.stringify(fields), aad: Buffer.from(`${r.shop_id}/${r.activity_id}/${c.id}`), key: keys.get(contactKey(r))!.key };
});
const nonces = randomBytes(12 * records.length);
const encrypted = personal.map((p, i) => {
  const c = createCipheriv('aes-256-gcm', p.key, nonces.subarray(12 * i, 12 * i + 12), { authTagLength: 16 });
  c.setAAD(p.aad);
  const body = c.update(p.text);
  c.final();
  return { body, tag: c.getAuthTag() };
});

/** Each step: what it does to the whole set once, and how many units (records or keys) that is. */
const steps: { name: string; units: number; run: () => unknown }[] = [
  { name: 'ingest: serialise (no encryption)', units: records.length, run: () => records.map((r) => eventsTopic.record(r)) },
  { name: 'ingest: seal + serialise', units: records.length, run: () => records.map((r) => eventsTopic.record(sealEventRecord(keys.get(contactKey(r))!, r))) },
  {
    name: 'floor: the AES-256-GCM encryption alone',
    units: records.length,
    run: () =>
      personal.map((p, i) => {
        const c = createCipheriv('aes-256-gcm', p.key, nonces.subarray(12 * i, 12 * i + 12), { authTagLength: 16 });
        c.setAAD(p.aad);
        const body = c.update(p.text);
        c.final();
        return [body, c.getAuthTag()];
      }),
  },
  {
    name: 'ingest: data key made + wrapped (per key, 100 a batch)',
    units: pairs.length,
    run: () => {
      for (let i = 0; i < pairs.length; i += 100) makeDataKeys(keyring, pairs.slice(i, i + 100));
    },
  },
  {
    name: 'floor: the AES-256-GCM decryption alone',
    units: records.length,
    run: () =>
      encrypted.map((e, i) => {
        const d = createDecipheriv('aes-256-gcm', personal[i].key, nonces.subarray(12 * i, 12 * i + 12), { authTagLength: 16 });
        d.setAAD(personal[i].aad);
        d.setAuthTag(e.tag);
        const body = d.update(e.body);
        d.final();
        return body;
      }),
  },
  { name: 'projector: decode (no encryption)', units: records.length, run: () => plainBytes.map(decode) },
  { name: 'projector: decode + open', units: records.length, run: () => openEventRecordsWith(states, sealedBytes.map(decode), log) },
  {
    name: 'projector: data key unwrapped (per key)',
    units: rows.length,
    run: async () => {
      // As a projector's batch does (contactStates): the master keys checked once, then each key unwrapped.
      const cache = new KeyCache(keyring);
      await cache.prepare(rows);
      for (const row of rows) cache.unwrapNow(row);
    },
  },
];

const cpuMicros = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};
const samples = new Map<string, number[]>(steps.map((s) => [s.name, []]));
for (let round = 0; round <= ROUNDS; round++) {
  for (const s of steps) {
    const t = cpuMicros();
    await s.run();
    const per = (cpuMicros() - t) / s.units;
    // Round 0 warms the code up and is not counted.
    if (round > 0) samples.get(s.name)!.push(per);
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const m = (name: string) => median(samples.get(steps.find((s) => s.name.startsWith(name))!.name)!);
const us = (x: number) => `${x.toFixed(1)} µs`;
console.log(
  `${records.length} records with a contact (${pairs.length} contacts, each new), ${ROUNDS} rounds; node ${process.version}; CPU per unit, median (min-max)`,
);
for (const [name, xs] of samples) console.log(`  ${name.padEnd(56)} ${us(median(xs)).padStart(9)}  (${us(Math.min(...xs))}-${us(Math.max(...xs))})`);
const ingestBase = m('ingest: serialise');
const projectorBase = m('projector: decode (');
const seal = m('ingest: seal') - ingestBase;
const keyMake = m('ingest: data key');
const open = m('projector: decode + open') - projectorBase;
const unwrap = m('projector: data key');
const perRecordKeys = pairs.length / records.length;
console.log(
  `seal adds ${us(seal)} per record (the AES-GCM call alone: ${us(m('floor: the AES-256-GCM encryption'))}): ${(m('ingest: seal') / ingestBase).toFixed(2)} x the serialisation alone`,
);
console.log(
  `with a new key per contact (${perRecordKeys.toFixed(2)} per record): ${us(seal + keyMake * perRecordKeys)} per record, ` +
    `${((ingestBase + seal + keyMake * perRecordKeys) / ingestBase).toFixed(2)} x`,
);
console.log(
  `open adds ${us(open)} per record (the AES-GCM call alone: ${us(m('floor: the AES-256-GCM decryption'))}): ${(m('projector: decode + open') / projectorBase).toFixed(2)} x the decode alone`,
);
console.log(
  `with an unwrap per contact: ${us(open + unwrap * perRecordKeys)} per record, ${((projectorBase + open + unwrap * perRecordKeys) / projectorBase).toFixed(2)} x`,
);
