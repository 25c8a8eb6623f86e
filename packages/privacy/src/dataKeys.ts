import { v4 as uuidv4 } from 'uuid';
import { createKeyedMicroBatcher } from '@shopstream/bus';
import { queryRows, sql, type Queryable } from '@shopstream/db';
import { newKey, newKeyBytes, secretKey, type SecretKey } from './aead.js';
import type { Keyring } from './keyring.js';
import { KeyMemory } from './keyMemory.js';

/** A contact's data key, unwrapped. */
export interface DataKey {
  keyId: string;
  key: SecretKey;
}

/** What a wrapped data key is bound to: it unwraps only for its own contact and key id. */
const wrapAad = (shopId: string, contactId: string, keyId: string) => `contact-key/${shopId}/${contactId}/${keyId}`;

/** A contact_keys row as the readers select it. */
export interface KeyRow {
  shop_id: string;
  contact_id: string;
  key_id: string;
  master_id: string;
  wrapped: string;
}
/** A row's data key, unwrapped under the master key it names. */
const unwrapRow = (keyring: Keyring, row: KeyRow): SecretKey =>
  secretKey(keyring.unwrap(row.master_id, row.wrapped, wrapAad(row.shop_id, row.contact_id, row.key_id)));

/** Reads the master keys again when a row names one this process does not hold: one rotated in since it read them. */
async function holdMastersOf(keyring: Keyring, rows: readonly KeyRow[]): Promise<void> {
  if (rows.some((r) => !keyring.knows(r.master_id))) await keyring.reload();
}

const keyRow = (r: Record<string, unknown>): KeyRow => ({
  shop_id: String(r.shop_id),
  contact_id: String(r.contact_id),
  key_id: String(r.key_id),
  master_id: String(r.master_id),
  wrapped: String(r.wrapped),
});

/**
 * The unwrapped data keys a process has used, by key id, each kept KEY_TTL_MS at most (keyMemory.ts): a key never
 * changes once made, and is only ever destroyed, which readers learn from contact_keys in their transaction
 * (contactStates), not from this cache.
 */
export class KeyCache {
  private readonly byId: KeyMemory<SecretKey>;
  constructor(
    private readonly keyring: Keyring,
    memory: ConstructorParameters<typeof KeyMemory>[0] = {},
  ) {
    this.byId = new KeyMemory(memory);
  }

  /** Reads the master keys again when a row not cached names one this process does not hold (a rotation since). */
  async prepare(rows: readonly KeyRow[]): Promise<void> {
    await holdMastersOf(
      this.keyring,
      rows.filter((r) => this.byId.get(r.key_id) === undefined),
    );
  }

  /** The row's key, from the cache or unwrapped (after prepare for rows whose master key may be new). */
  unwrapNow(row: KeyRow): SecretKey {
    const hit = this.byId.get(row.key_id);
    if (hit) return hit;
    const key = unwrapRow(this.keyring, row);
    this.byId.set(row.key_id, key);
    return key;
  }

  async unwrap(row: KeyRow): Promise<SecretKey> {
    await this.prepare([row]);
    return this.unwrapNow(row);
  }
}

interface KeyRequest {
  shopId: string;
  contactIds: string[];
  keys?: Map<string, DataKey>;
}

/**
 * The data keys ingest seals with: one per contact, made on the contact's first event (concurrent replicas
 * agree on one: the first insert wins) and remembered. The look-ups of concurrent requests are gathered for
 * `lingerMs` into one (as the contact look-ups are): one SELECT of the keys that exist, one INSERT of those still
 * missing, a read-back of the ones another replica inserted meanwhile. A contact already erased gets no key: its
 * records are sealed under a throw-away key, which no reader can open (they are read as erased).
 */
export class ContactKeys {
  /** By `<shop>/<contact>`. */
  private readonly cache = new KeyMemory<DataKey>();
  /**
   * Key rows read with their contacts (remember), by `<shop>/<contact>`, unwrapped when a request first needs the key
   * (forContacts): not in the contact resolver's flush, which a shop's concurrent requests wait for one at a time
   * (unwrapping there lengthened every request of the shop: bench/README.md, "Sealing off and on"). Kept as the
   * keys are (KEY_TTL_MS at most, forgotten on an erasure).
   */
  private readonly wrapped = new KeyMemory<KeyRow>();
  private readonly batcher;

  constructor(
    private readonly db: Queryable,
    private readonly keyring: Keyring,
    opts: { lingerMs?: number } = {},
  ) {
    // A batcher per shop, as ingest's contact look-ups: one shop's bulk of new keys does not delay another shop's.
    this.batcher = createKeyedMicroBatcher<KeyRequest>({
      key: (r) => r.shopId,
      lingerMs: opts.lingerMs ?? 0,
      maxWeight: 2_000,
      weight: (r) => r.contactIds.length,
      flush: (requests) => this.fetch(requests),
    });
  }

  /** The data key of each contact of the shop, made where missing. */
  async forContacts(shopId: string, contactIds: string[]): Promise<Map<string, DataKey>> {
    const out = new Map<string, DataKey>();
    const missing: string[] = [];
    const toUnwrap: KeyRow[] = [];
    for (const id of new Set(contactIds)) {
      const name = `${shopId}/${id}`;
      const hit = this.cache.get(name);
      if (hit) {
        out.set(id, hit);
        continue;
      }
      const row = this.wrapped.get(name);
      if (row) toUnwrap.push(row);
      else missing.push(id);
    }
    if (toUnwrap.length > 0) {
      await holdMastersOf(this.keyring, toUnwrap);
      for (const row of toUnwrap) {
        const name = `${row.shop_id}/${row.contact_id}`;
        const k = { keyId: row.key_id, key: unwrapRow(this.keyring, row) };
        this.cache.set(name, k);
        this.wrapped.delete(name);
        out.set(row.contact_id, k);
      }
    }
    if (missing.length === 0) return out;
    const request: KeyRequest = { shopId, contactIds: missing };
    await this.batcher.add(request);
    for (const [id, k] of request.keys!) out.set(id, k);
    return out;
  }

  /**
   * New data keys for contacts about to be inserted, for the statement that inserts them (ingest's resolveContacts),
   * so that a new contact's key costs no round trip of its own; `remember` them once that statement is done.
   */
  makeFor(shopId: string, contactIds: string[]): MadeKey[] {
    return makeDataKeys(
      this.keyring,
      contactIds.map((contact) => ({ shop: shopId, contact })),
    );
  }

  /**
   * Keys inserted with their contacts (makeFor), or read in the statement that found them: remembered, so the
   * request's forContacts finds them without a look-up of its own. A row read is unwrapped there, not here.
   */
  async remember(keys: { made?: readonly MadeKey[]; rows?: readonly KeyRow[] }): Promise<void> {
    for (const m of keys.made ?? []) this.cache.set(`${m.shop}/${m.contact}`, { keyId: m.keyId, key: m.key });
    for (const r of keys.rows ?? []) {
      const name = `${r.shop_id}/${r.contact_id}`;
      if (this.cache.get(name) === undefined) this.wrapped.set(name, r);
    }
  }

  /** Waits for the look-ups in progress. */
  close(): Promise<void> {
    return this.batcher.close();
  }

  private async fetch(requests: KeyRequest[]): Promise<void> {
    const found = new Map<string, DataKey>();
    const k = (shopId: string, contactId: string) => `${shopId}/${contactId}`;
    const pairs = [...new Map(requests.flatMap((r) => r.contactIds.map((c) => [k(r.shopId, c), { shop: r.shopId, contact: c }] as const))).values()];
    const readBack = async (of: { shop: string; contact: string }[]) => {
      const rows = await queryRows(
        this.db,
        sql`
        SELECT c.shop_id, c.contact_id, c.key_id, c.master_id, c.wrapped FROM contact_keys c
        WHERE (c.shop_id, c.contact_id) IN (SELECT * FROM unnest(${of.map((p) => p.shop)}::uuid[], ${of.map((p) => p.contact)}::uuid[]))`,
        keyRow,
      );
      await holdMastersOf(this.keyring, rows);
      for (const row of rows) found.set(k(row.shop_id, row.contact_id), { keyId: row.key_id, key: unwrapRow(this.keyring, row) });
    };
    await readBack(pairs);
    const missing = pairs.filter((p) => !found.has(k(p.shop, p.contact)));
    if (missing.length > 0) {
      const made = makeDataKeys(this.keyring, missing);
      const inserted = await this.db.query(sql`
        INSERT INTO contact_keys (shop_id, contact_id, key_id, master_id, wrapped)
        SELECT k.shop_id, k.contact_id, k.key_id, k.master_id, k.wrapped
        FROM unnest(${made.map((m) => m.shop)}::uuid[], ${made.map((m) => m.contact)}::uuid[], ${made.map((m) => m.keyId)}::uuid[],
                    ${made.map((m) => m.masterId)}::text[], ${made.map((m) => m.wrapped)}::text[]) AS k(shop_id, contact_id, key_id, master_id, wrapped)
        WHERE NOT EXISTS (SELECT 1 FROM erased_contacts e WHERE e.shop_id = k.shop_id AND e.contact_id = k.contact_id)
        ON CONFLICT (shop_id, contact_id) DO NOTHING
        RETURNING shop_id, contact_id`);
      const ours = new Set(inserted.map((r) => k(String(r.shop_id), String(r.contact_id))));
      for (const m of made) if (ours.has(k(m.shop, m.contact))) found.set(k(m.shop, m.contact), { keyId: m.keyId, key: m.key });
      const lost = missing.filter((p) => !ours.has(k(p.shop, p.contact)));
      if (lost.length > 0) await readBack(lost);
    }
    for (const [key, dataKey] of found) this.cache.set(key, dataKey);
    for (const r of requests) {
      // A contact erased meanwhile: sealed under a key nobody keeps (and not remembered).
      r.keys = new Map(r.contactIds.map((c) => [c, found.get(k(r.shopId, c)) ?? { keyId: uuidv4(), key: newKey() }]));
    }
  }
}

/** A data key made for a contact: its row's fields and the key itself. */
export interface MadeKey {
  shop: string;
  contact: string;
  keyId: string;
  key: SecretKey;
  masterId: string;
  wrapped: string;
}

/** New data keys for these contacts, each wrapped under the current master key, bound to its contact and key id. */
export function makeDataKeys(keyring: Keyring, pairs: { shop: string; contact: string }[]): MadeKey[] {
  const fresh = newKeyBytes(pairs.length);
  return pairs.map(({ shop, contact }, i) => {
    const keyId = uuidv4();
    const { masterId, wrapped } = keyring.wrap(fresh[i], wrapAad(shop, contact, keyId));
    // Named fields, not a spread of the pair: the spread cost as much as the wrap.
    return { shop, contact, keyId, key: secretKey(fresh[i]), masterId, wrapped };
  });
}

/** A (shop, contact) pair as the readers look them up. */
export interface ContactRef {
  shop_id: string;
  contact_id: string;
}

/** What a reader knows of a batch's contacts, in its transaction. */
export interface ContactStates {
  /** The contact's live data key, or undefined when it has none (erased, or never had one). */
  key(shopId: string, contactId: string): DataKey | undefined;
  /** Whether the contact was erased. */
  erased(shopId: string, contactId: string): boolean;
}

/**
 * The live data keys and the erasures of the contacts, read in the caller's transaction. The key rows are
 * locked FOR KEY SHARE: an erasure that deletes one waits for this transaction, and this one waits for an
 * erasure in flight, then sees it; so rows this transaction writes for a contact are either seen and deleted by
 * the erasure, or never written.
 */
export async function contactStates(tx: Queryable, cache: KeyCache, refs: ContactRef[]): Promise<ContactStates> {
  const keyRows = new Map<string, KeyRow>();
  const keys = new Map<string, DataKey>();
  const erased = new Set<string>();
  const k = (shopId: string, contactId: string) => `${shopId}/${contactId}`;
  const distinct = [...new Map(refs.map((r) => [k(r.shop_id, r.contact_id), r])).values()];
  if (distinct.length > 0) {
    const shops = distinct.map((r) => r.shop_id);
    const contacts = distinct.map((r) => r.contact_id);
    const rows = await queryRows(
      tx,
      sql`
      SELECT c.shop_id, c.contact_id, c.key_id, c.master_id, c.wrapped FROM contact_keys c
      WHERE (c.shop_id, c.contact_id) IN (SELECT * FROM unnest(${shops}::uuid[], ${contacts}::uuid[]))
      FOR KEY SHARE`,
      keyRow,
    );
    await cache.prepare(rows);
    for (const row of rows) keyRows.set(k(row.shop_id, row.contact_id), row);
    const gone = await tx.query(sql`
      SELECT e.shop_id, e.contact_id FROM erased_contacts e
      WHERE (e.shop_id, e.contact_id) IN (SELECT * FROM unnest(${shops}::uuid[], ${contacts}::uuid[]))`);
    for (const r of gone) erased.add(k(String(r.shop_id), String(r.contact_id)));
  }
  return {
    // Unwrapped when first asked for: a reader that only checks erasures (the flow matcher) unwraps none.
    key: (shopId, contactId) => {
      const name = k(shopId, contactId);
      const hit = keys.get(name);
      if (hit) return hit;
      const row = keyRows.get(name);
      if (!row) return undefined;
      const key = { keyId: row.key_id, key: cache.unwrapNow(row) };
      keys.set(name, key);
      return key;
    },
    erased: (shopId, contactId) => erased.has(k(shopId, contactId)),
  };
}
