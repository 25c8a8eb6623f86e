import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { queryRows, sql, type Queryable, type SQLQuery } from '@shopstream/db';
import { ContactKeys, keyringOf, type DataKey } from '@shopstream/privacy';
import { createTestShop, startTestRuntime, startTestServer, type TestServer } from '@shopstream/harness';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from './index.js';
import { contactRow, resolveContacts } from './resolveContacts.js';
import { createContactResolver } from './contactResolver.js';

let rt: Runtime;
let server: TestServer;

beforeAll(async () => {
  rt = await startTestRuntime({}, 'ingest-contacts');
  server = await startTestServer(rt, [await startIngestApi(rt)]);
});

afterAll(async () => {
  await server?.stop();
});

/** Data keys are KeyObjects: compared by their bytes (toEqual finds any two KeyObjects equal). */
const sameKey = (a: DataKey | undefined, b: DataKey) => a !== undefined && a.keyId === b.keyId && a.key.equals(b.key);

const rowsOf = (shopId: string) =>
  queryRows(rt.db, sql`SELECT id, email, phone, remote_id, name FROM contacts WHERE shop_id = ${shopId} ORDER BY created_at, id`, contactRow);

async function insertContact(shopId: string, c: { email?: string; phone?: string; remote_id?: string; name?: string }): Promise<string> {
  const id = randomUUID();
  await rt.db.query(
    sql`INSERT INTO contacts (shop_id, id, email, phone, remote_id, name) VALUES (${shopId}, ${id}, ${c.email ?? null}, ${c.phone ?? null}, ${c.remote_id ?? null}, ${c.name ?? null})`,
  );
  return id;
}

async function postEvent(headers: Record<string, string>, contact: Record<string, string>) {
  const res = await fetch(`${server.baseUrl}/v2026-04/events/`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ name: 'Signed Up', metric: { metric_name: 'signed_up' }, contact }),
  });
  return { status: res.status, body: (await res.json()) as any };
}

describe('concurrent first requests for one identity', () => {
  it('20 concurrent requests for one new email create ONE contact, and all 20 answers carry its id', async () => {
    const shop = await createTestShop(rt);
    const answers = await Promise.all(Array.from({ length: 20 }, () => postEvent(shop.headers, { email: 'new@example.com' })));
    const rows = await rowsOf(shop.shopId);
    expect(rows).toEqual([{ id: expect.any(String), email: 'new@example.com', phone: null, remote_id: null, name: null }]);
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(202));
    expect(answers.map((a) => a.body.contact)).toEqual(Array(20).fill({ id: rows[0].id, email: 'new@example.com' }));
  });

  it('20 concurrent resolutions of one identity with three identifiers, some in bulk-sized lists, settle on one contact', async () => {
    const shopId = randomUUID();
    const q = { email: 'trio@example.com', phone: '+14155552671', remote_id: 'crm-7' };
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        // Each caller knows a different part of the identity first; every one names the email.
        resolveContacts(
          rt.db,
          shopId,
          i % 2 === 0
            ? [{ email: q.email }, q]
            : [
                { phone: q.phone, email: q.email },
                { remote_id: q.remote_id, email: q.email },
              ],
        ),
      ),
    );
    const rows = await rowsOf(shopId);
    expect(rows).toEqual([{ id: expect.any(String), ...q, name: null }]);
    for (const r of results) expect(r.map((c) => c.id)).toEqual([rows[0].id, rows[0].id]);
  });

  it('concurrent lists naming the same new identities in opposite orders create each once', async () => {
    const shopId = randomUUID();
    const emails = Array.from({ length: 10 }, (_, i) => `p${i}@example.com`);
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        resolveContacts(
          rt.db,
          shopId,
          (i % 2 === 0 ? emails : [...emails].reverse()).map((email) => ({ email })),
        ),
      ),
    );
    const rows = await rowsOf(shopId);
    expect(rows.map((r) => r.email).sort()).toEqual(emails);
    const idOf = new Map(rows.map((r) => [r.email, r.id]));
    results.forEach((r, i) => expect(r.map((c) => c.id)).toEqual((i % 2 === 0 ? emails : [...emails].reverse()).map((e) => idOf.get(e))));
  });
});

describe('resolution order and identifier gaining', () => {
  it('remote_id first, then email, then phone; a match gains only what no other contact holds', async () => {
    const shopId = randomUUID();
    const a = await insertContact(shopId, { remote_id: 'r-a' });
    const b = await insertContact(shopId, { email: 'b@example.com' });
    const c = await insertContact(shopId, { phone: '+442079460958' });

    const [byRemote, byEmail, byPhone] = await resolveContacts(rt.db, shopId, [
      // Matches A by remote_id; B holds the email, so A does not gain it.
      { remote_id: 'r-a', email: 'b@example.com' },
      // Matches B by email; C holds the phone, so B does not gain it.
      { email: 'b@example.com', phone: '+442079460958' },
      // Matches C by phone (the email is nobody's): C gains the email.
      { email: 'c@example.com', phone: '+442079460958', name: 'Cee' },
    ]);
    expect(byRemote).toEqual({ id: a, remote_id: 'r-a', email: null, phone: null, name: null });
    expect(byEmail).toEqual({ id: b, remote_id: null, email: 'b@example.com', phone: null, name: null });
    expect(byPhone).toEqual({ id: c, remote_id: null, email: 'c@example.com', phone: '+442079460958', name: 'Cee' });
    expect(await rowsOf(shopId)).toEqual([
      { id: a, remote_id: 'r-a', email: null, phone: null, name: null },
      { id: b, remote_id: null, email: 'b@example.com', phone: null, name: null },
      { id: c, remote_id: null, email: 'c@example.com', phone: '+442079460958', name: 'Cee' },
    ]);
  });

  it('a contact keeps the identifiers and the name it has: only empty ones are filled', async () => {
    const shopId = randomUUID();
    const id = await insertContact(shopId, { email: 'keep@example.com', phone: '+14155552671', name: 'Old' });
    const [r] = await resolveContacts(rt.db, shopId, [{ email: 'keep@example.com', phone: '+12025550143', remote_id: 'crm-1', name: 'New' }]);
    expect(r).toEqual({ id, email: 'keep@example.com', phone: '+14155552671', remote_id: 'crm-1', name: 'Old' });
    expect(await rowsOf(shopId)).toEqual([{ id, email: 'keep@example.com', phone: '+14155552671', remote_id: 'crm-1', name: 'Old' }]);
  });

  it('queries of one list that share an identifier share one new contact, which gains what the later ones add', async () => {
    const shopId = randomUUID();
    const [x, y, z] = await resolveContacts(rt.db, shopId, [
      { email: 'x@example.com' },
      { email: 'x@example.com', phone: '+14155552671' },
      { phone: '+12025550143' },
    ]);
    const rows = await rowsOf(shopId);
    expect(rows).toHaveLength(2);
    const shared = rows.find((r) => r.email === 'x@example.com');
    expect(shared).toEqual({ id: expect.any(String), email: 'x@example.com', phone: '+14155552671', remote_id: null, name: null });
    expect([x.id, y.id]).toEqual([shared?.id, shared?.id]);
    expect(z).toEqual({ id: rows.find((r) => r.phone === '+12025550143')?.id, email: null, phone: '+12025550143', remote_id: null, name: null });
  });

  it('contacts are per shop: the same email in two shops is two contacts', async () => {
    const [s1, s2] = [randomUUID(), randomUUID()];
    const [a] = await resolveContacts(rt.db, s1, [{ email: 'same@example.com' }]);
    const [b] = await resolveContacts(rt.db, s2, [{ email: 'same@example.com' }]);
    expect(a.id).not.toBe(b.id);
    expect(await rowsOf(s1)).toEqual([{ id: a.id, email: 'same@example.com', phone: null, remote_id: null, name: null }]);
  });

  it('over HTTP: emails are trimmed and lower-cased, phones normalised to E.164, and the answer omits what the contact lacks', async () => {
    const shop = await createTestShop(rt);
    const first = await postEvent(shop.headers, { email: '  Mixed.Case@Example.COM ', phone: '+1 (415) 555-2671', name: 'Mia' });
    expect(first.status).toBe(202);
    expect(first.body.contact).toEqual({ id: expect.any(String), email: 'mixed.case@example.com', phone: '+14155552671' });
    const again = await postEvent(shop.headers, { phone: '+14155552671', remote_id: 'crm-9' });
    expect(again.body.contact).toEqual({ id: first.body.contact.id, email: 'mixed.case@example.com', phone: '+14155552671', remote_id: 'crm-9' });
    expect(await rowsOf(shop.shopId)).toEqual([
      { id: first.body.contact.id, email: 'mixed.case@example.com', phone: '+14155552671', remote_id: 'crm-9', name: 'Mia' },
    ]);
  });
});

describe('createContactResolver (look-ups of concurrent requests gathered)', () => {
  it('answers each caller with its own contacts, per shop, and fails only the caller whose shop failed', async () => {
    const resolver = createContactResolver(rt.db, { lingerMs: 20 });
    const [s1, s2] = [randomUUID(), randomUUID()];
    const [a, b, c, bad] = await Promise.allSettled([
      resolver.resolve(s1, [{ email: 'one@example.com' }]),
      resolver.resolve(s1, [{ email: 'two@example.com' }, { email: 'one@example.com', remote_id: 'crm-1' }]),
      resolver.resolve(s2, [{ email: 'one@example.com' }]),
      // Not a uuid: the database refuses this shop's query.
      resolver.resolve('not-a-shop', [{ email: 'one@example.com' }]),
    ]);
    await resolver.close();
    const rows1 = await rowsOf(s1);
    const rows2 = await rowsOf(s2);
    const one = rows1.find((r) => r.email === 'one@example.com');
    const two = rows1.find((r) => r.email === 'two@example.com');
    expect(rows1).toHaveLength(2);
    expect(one).toEqual({ id: expect.any(String), email: 'one@example.com', phone: null, remote_id: 'crm-1', name: null });
    expect(a).toEqual({ status: 'fulfilled', value: [{ ...one }] });
    expect(b).toEqual({ status: 'fulfilled', value: [{ ...two }, { ...one }] });
    expect(c).toEqual({ status: 'fulfilled', value: [{ id: rows2[0].id, email: 'one@example.com', phone: null, remote_id: null, name: null }] });
    expect(bad.status).toBe('rejected');
  });
});

describe('Unicode spellings of one identifier', () => {
  const nfc = 'client-Am\u00e9lie-\u00c5ngstr\u00f6m';
  const nfd = nfc.normalize('NFD');

  it('NFC and NFD spellings of one remote_id resolve to one contact, stored in NFC (they made two contacts)', async () => {
    expect(nfd).not.toBe(nfc);
    const shop = await createTestShop(rt);
    const first = await postEvent(shop.headers, { remote_id: nfc });
    const second = await postEvent(shop.headers, { remote_id: nfd });
    expect([first.status, second.status]).toEqual([202, 202]);
    const rows = await rowsOf(shop.shopId);
    expect(rows).toEqual([{ id: first.body.contact.id, email: null, phone: null, remote_id: nfc, name: null }]);
    expect(second.body.contact).toEqual({ id: first.body.contact.id, remote_id: nfc });
  });

  it('a contact stored in NFD before normalisation is found by either spelling, not duplicated', async () => {
    const shop = await createTestShop(rt);
    const id = await insertContact(shop.shopId, { remote_id: nfd });
    for (const spelling of [nfc, nfd]) {
      const a = await postEvent(shop.headers, { remote_id: spelling });
      expect(a.status).toBe(202);
      expect(a.body.contact.id).toBe(id);
    }
    expect((await rowsOf(shop.shopId)).map((r) => r.id)).toEqual([id]);
  });
});

describe('data keys carried by the resolution', () => {
  it("a new contact's key is inserted with it and an existing contact's key read with it: the request's key look-up then makes no query", async () => {
    const shop = await createTestShop(rt);
    const keyring = keyringOf([randomBytes(32)]);
    // The keys' own look-ups counted: after a resolution that carried them, forContacts must find them remembered.
    let keyQueries = 0;
    const counted: Queryable = { query: ((q: SQLQuery) => (keyQueries++, rt.db.query(q))) as Queryable['query'] };
    const keys = new ContactKeys(counted, keyring);
    const existingId = await insertContact(shop.shopId, { email: 'old@example.com' });
    // The existing contact's key, made as ingest makes them.
    const [made] = keys.makeFor(shop.shopId, [existingId]);
    await rt.db.query(
      sql`INSERT INTO contact_keys (shop_id, contact_id, key_id, master_id, wrapped) VALUES (${shop.shopId}, ${existingId}, ${made.keyId}, ${made.masterId}, ${made.wrapped})`,
    );

    const [old, fresh] = await resolveContacts(rt.db, shop.shopId, [{ email: 'old@example.com' }, { email: 'new@example.com' }], keys);
    expect(old.id).toBe(existingId);
    const rows = await queryRows(rt.db, sql`SELECT contact_id, key_id FROM contact_keys WHERE shop_id = ${shop.shopId} ORDER BY contact_id`, (r) => ({
      contact: String(r.contact_id),
      keyId: String(r.key_id),
    }));
    expect(rows.map((r) => r.contact).sort()).toEqual([existingId, fresh.id].sort());

    const found = await keys.forContacts(shop.shopId, [old.id, fresh.id]);
    expect(keyQueries).toBe(0);
    expect(sameKey(found.get(old.id), made)).toBe(true);
    expect(found.get(fresh.id)!.keyId).toBe(rows.find((r) => r.contact === fresh.id)!.keyId);
    await keys.close();
  });

  it('a stored key is unwrapped by the request that seals with it, not in the resolution: one that does not open fails that request alone', async () => {
    const shop = await createTestShop(rt);
    const keys = new ContactKeys(rt.db, keyringOf([randomBytes(32)]));
    const badId = await insertContact(shop.shopId, { email: 'bad@example.com' });
    const goodId = await insertContact(shop.shopId, { email: 'good@example.com' });
    const [bad, good] = keys.makeFor(shop.shopId, [badId, goodId]);
    // bad's row holds a key wrapped for another contact: it does not unwrap for this one.
    const [elsewhere] = keys.makeFor(shop.shopId, [randomUUID()]);
    for (const [contact, m] of [
      [badId, { ...bad, wrapped: elsewhere.wrapped }],
      [goodId, good],
    ] as const) {
      await rt.db.query(
        sql`INSERT INTO contact_keys (shop_id, contact_id, key_id, master_id, wrapped) VALUES (${shop.shopId}, ${contact}, ${m.keyId}, ${m.masterId}, ${m.wrapped})`,
      );
    }

    // The shop's resolution (what its concurrent requests wait for together) does not unwrap: it succeeds for both.
    const resolved = await resolveContacts(rt.db, shop.shopId, [{ email: 'bad@example.com' }, { email: 'good@example.com' }], keys);
    expect(resolved.map((c) => c.id)).toEqual([badId, goodId]);
    expect(sameKey((await keys.forContacts(shop.shopId, [goodId])).get(goodId), good)).toBe(true);
    await expect(keys.forContacts(shop.shopId, [badId])).rejects.toThrow();
    await keys.close();
  });
});
