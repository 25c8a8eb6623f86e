import { v4 as uuidv4 } from 'uuid';
import { createMicroBatcher } from '@shopstream/bus';
import { queryRows, sql, type Queryable } from '@shopstream/db';
import { newKey, newKeys } from './aead.js';
import { UnknownMasterKeyError, type Keyring } from './keyring.js';

/** A contact's data key, unwrapped. */
export interface DataKey {
  keyId: string;
  key: Buffer;
}

/** What a wrapped data key is bound to: it unwraps only for its own contact and key id. */
const wrapAad = (shopId: string, contactId: string, keyId: string) => `contact-key/${shopId}/${contactId}/${keyId}`;

/** Keys a process remembers (about 150 bytes each); past it the cache starts again, as the other caches here do. */
const CACHE_MAX = 200_000;

/**
 * The unwrapped data keys a process has used, by key id: a key never changes once made, and is only ever
 * destroyed, which readers learn from contact_keys in their transaction (liveContactKeys), not from this cache.
 */
export class KeyCache {
  private readonly byId = new Map<string, Buffer>();
  constructor(private readonly keyring: Keyring) {}

  async unwrap(row: { shop_id: string; contact_id: string; key_id: string; master_id: string; wrapped: string }): Promise<Buffer> {
    const hit = this.byId.get(row.key_id);
    if (hit) return hit;
    let key: Buffer;
    try {
      key = this.keyring.unwrap(row.master_id, row.wrapped, wrapAad(row.shop_id, row.contact_id, row.key_id));
    } catch (e) {
      if (!(e instanceof UnknownMasterKeyError)) throw e;
      // A rotation may have added a key since this process read them.
      await this.keyring.reload();
      key = this.keyring.unwrap(row.master_id, row.wrapped, wrapAad(row.shop_id, row.contact_id, row.key_id));
    }
    if (this.byId.size >= CACHE_MAX) this.byId.clear();
    this.byId.set(row.key_id, key);
    return key;
  }
}

interface KeyRow {
  shop_id: string;
  contact_id: string;
  key_id: string;
  master_id: string;
  wrapped: string;
}
const keyRow = (r: Record<string, unknown>): KeyRow => ({
  shop_id: String(r.shop_id),
  contact_id: String(r.contact_id),
  key_id: String(r.key_id),
  master_id: String(r.master_id),
  wrapped: String(r.wrapped),
});

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
  private readonly cache = new Map<string, DataKey>();
  private readonly unwrapped: KeyCache;
  private readonly batcher;

  constructor(
    private readonly db: Queryable,
    private readonly keyring: Keyring,
    opts: { lingerMs?: number } = {},
  ) {
    this.unwrapped = new KeyCache(keyring);
    this.batcher = createMicroBatcher<KeyRequest>({
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
    for (const id of new Set(contactIds)) {
      const hit = this.cache.get(`${shopId}/${id}`);
      if (hit) out.set(id, hit);
      else missing.push(id);
    }
    if (missing.length === 0) return out;
    const request: KeyRequest = { shopId, contactIds: missing };
    await this.batcher.add(request);
    for (const [id, k] of request.keys!) out.set(id, k);
    return out;
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
      for (const row of rows) found.set(k(row.shop_id, row.contact_id), { keyId: row.key_id, key: await this.unwrapped.unwrap(row) });
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
    for (const [key, dataKey] of found) {
      if (this.cache.size >= CACHE_MAX) this.cache.clear();
      this.cache.set(key, dataKey);
    }
    for (const r of requests) {
      // A contact erased meanwhile: sealed under a key nobody keeps (and not remembered).
      r.keys = new Map(r.contactIds.map((c) => [c, found.get(k(r.shopId, c)) ?? { keyId: uuidv4(), key: newKey() }]));
    }
  }
}

/** New data keys for these contacts, each wrapped under the current master key, bound to its contact and key id. */
export function makeDataKeys<P extends { shop: string; contact: string }>(
  keyring: Keyring,
  pairs: P[],
): (P & DataKey & { masterId: string; wrapped: string })[] {
  const fresh = newKeys(pairs.length);
  return pairs.map((p, i) => {
    const keyId = uuidv4();
    const key = fresh[i];
    const { masterId, wrapped } = keyring.wrap(key, wrapAad(p.shop, p.contact, keyId));
    return { ...p, keyId, key, masterId, wrapped };
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
    for (const row of rows) keys.set(k(row.shop_id, row.contact_id), { keyId: row.key_id, key: await cache.unwrap(row) });
    const gone = await tx.query(sql`
      SELECT e.shop_id, e.contact_id FROM erased_contacts e
      WHERE (e.shop_id, e.contact_id) IN (SELECT * FROM unnest(${shops}::uuid[], ${contacts}::uuid[]))`);
    for (const r of gone) erased.add(k(String(r.shop_id), String(r.contact_id)));
  }
  return {
    key: (shopId, contactId) => keys.get(k(shopId, contactId)),
    erased: (shopId, contactId) => erased.has(k(shopId, contactId)),
  };
}
