import { createHash, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, type Db } from '@shopstream/db';
import { ApiKeyStore, createBaseApp, newSecret, FailedAuthLimiter, finishApp, listen, requireAuth, type RunningServer } from '@shopstream/http';
import { addressKey } from '../packages/http/src/authFailures.js';
import type { Runtime } from '@shopstream/runtime';
import { createTestShop, startTestRuntime } from '@shopstream/harness';

/**
 * What API key look-ups cost the real database: a store over a Db that counts the queries it passes on to
 * PostgreSQL. Unknown secrets are answered from a bounded negative cache, so a flood of bogus keys costs one
 * query per distinct secret per TTL, not one per request, and never evicts the keys in use.
 */
let rt: Runtime;
beforeAll(async () => {
  rt = await startTestRuntime({}, 'api-key-cache-spec');
});
afterAll(async () => {
  await rt?.close();
});

function counting(db: Db): { db: Db; queries: () => number } {
  let n = 0;
  const wrapped = new Proxy(db, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target);
      if (prop === 'query') return (...args: unknown[]) => (n++, (v as (...a: unknown[]) => unknown).apply(target, args));
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  return { db: wrapped, queries: () => n };
}

/** A secret of a real key's shape (`ssk_` and 43 base64url characters) that no key has. */
const bogus = (tag: string, i: number) => `ssk_${tag}_${String(i).padStart(42 - tag.length, '0')}`;

describe('API key look-ups and the database', () => {
  it('a known key: one query per TTL however often it is used', async () => {
    const shop = await createTestShop(rt);
    const c = counting(rt.db);
    const store = new ApiKeyStore(c.db, 60_000);
    for (let i = 0; i < 1_000; i++) expect((await store.resolve(shop.key))?.shops.has(shop.shopId)).toBe(true);
    expect(c.queries()).toBe(1);
  });

  it('unknown keys: one query per distinct secret, repeats answered from the negative cache; a flood evicts no known key', async () => {
    const shop = await createTestShop(rt);
    const c = counting(rt.db);
    const store = new ApiKeyStore(c.db, 60_000);
    await store.resolve(shop.key);
    for (let round = 0; round < 5; round++) for (let i = 0; i < 500; i++) expect(await store.resolve(bogus('bogus', i))).toBeNull();
    expect(c.queries()).toBe(1 + 500);
    // Past the negative cache's 10,000 entries: the oldest bogus secrets go, the known key stays.
    for (let i = 0; i < 10_500; i++) await store.resolve(bogus('flood', i));
    const before = c.queries();
    expect(await store.resolve(shop.key)).not.toBeNull();
    expect(c.queries()).toBe(before);
    // The newest misses are still cached; the oldest were evicted and cost a query again.
    await store.resolve(bogus('flood', 10_499));
    expect(c.queries()).toBe(before);
    await store.resolve(bogus('bogus', 0));
    expect(c.queries()).toBe(before + 1);
  });

  it('a revoked key stops working once its entry expires', async () => {
    const shop = await createTestShop(rt);
    const store = new ApiKeyStore(rt.db, 50);
    const key = await store.resolve(shop.key);
    expect(key).not.toBeNull();
    await store.revoke(key!.id);
    await new Promise((r) => setTimeout(r, 80));
    expect(await store.resolve(shop.key)).toBeNull();
  });
});

describe('secrets that cost no query', () => {
  it('a secret not of a key shape is refused without a query (each one cost a query: 409 transactions for a flood)', async () => {
    const c = counting(rt.db);
    const store = new ApiKeyStore(c.db, 60_000);
    for (const secret of ['nope', 'ssk_short', `ssk_${'a'.repeat(44)}`, `ssk_${'a'.repeat(42)}!`, 'x'.repeat(10_000), `bearer-${'a'.repeat(43)}`]) {
      expect(store.cached(secret)).toBeNull();
      expect(await store.resolve(secret)).toBeNull();
    }
    expect(c.queries()).toBe(0);
    // Of the shape: looked up once.
    expect(await store.resolve(bogus('shaped', 1))).toBeNull();
    expect(c.queries()).toBe(1);
  });

  it('a secret of another shape made here (BOOTSTRAP_API_KEYS names any secret) is looked up and works; others of that shape cost nothing', async () => {
    const c = counting(rt.db);
    const store = new ApiKeyStore(c.db, 60_000);
    const shopId = randomUUID();
    const secret = `dev-key-${randomUUID()}`;
    await store.create([shopId], 'bootstrap', secret);
    const made = c.queries();
    expect((await store.resolve(secret))?.shops.has(shopId)).toBe(true);
    expect(await store.resolve(`dev-key-${randomUUID()}`)).toBeNull();
    expect(c.queries() - made).toBe(1);
  });

  it('concurrent look-ups of one secret share one query, known or unknown', async () => {
    const shop = await createTestShop(rt);
    const c = counting(rt.db);
    const store = new ApiKeyStore(c.db, 60_000);
    const known = await Promise.all(Array.from({ length: 50 }, () => store.resolve(shop.key)));
    expect(known.every((k) => k?.shops.has(shop.shopId))).toBe(true);
    expect(c.queries()).toBe(1);
    const unknown = await Promise.all(Array.from({ length: 50 }, () => store.resolve(bogus('concurrent', 1))));
    expect(unknown.every((k) => k === null)).toBe(true);
    expect(c.queries()).toBe(2);
  });

  it('finds a key stored as the SHA-256 of its secret, as every version has stored them', async () => {
    const shop = await createTestShop(rt);
    const secret = newSecret();
    const id = randomUUID();
    await rt.db.query(
      sql`INSERT INTO api_keys (id, name, secret_hash) VALUES (${id}, 'stored before', ${createHash('sha256').update(secret, 'utf8').digest()})`,
    );
    await rt.db.query(sql`INSERT INTO api_key_shops (api_key_id, shop_id) VALUES (${id}, ${shop.shopId})`);
    const key = await new ApiKeyStore(rt.db, 60_000).resolve(secret);
    expect(key?.id).toBe(id);
    expect(key?.shops.has(shop.shopId)).toBe(true);
  });
});

describe('failed authentications per client address', () => {
  let clock = 0;
  let server: RunningServer;
  let c: ReturnType<typeof counting>;
  let store: ApiKeyStore;
  const BURST = 5;

  beforeAll(async () => {
    c = counting(rt.db);
    // A short TTL: the known key's entry expires between requests, and its refresh must still go through.
    store = new ApiKeyStore(c.db, 1);
    const app = createBaseApp({ service: 'auth-spec', logger: rt.logger, readiness: {}, trustProxy: 'loopback' });
    store.failures = new FailedAuthLimiter({ burst: BURST, perMinute: 60, now: () => clock });
    app.use('/v2026-04', requireAuth(store));
    app.get('/v2026-04/ping/', (req, res) => void res.json({ shop: req.shopId }));
    finishApp(app);
    server = await listen(app, 0, '127.0.0.1', rt.logger);
  });
  afterAll(async () => {
    await server?.close();
  });

  const get = async (secret: string, shopId: string, from: string) => {
    const res = await fetch(`http://127.0.0.1:${server.port}/v2026-04/ping/`, {
      headers: { authorization: `Bearer ${secret}`, 'x-shop-id': shopId, 'x-forwarded-for': from },
    });
    return { status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json()) as any };
  };

  it('distinct unknown keys from one address: 401 for the first few (one query each), then 429 + Retry-After with no query; other addresses and known keys go on', async () => {
    const shop = await createTestShop(rt);
    const from = '198.51.100.7';
    expect((await get(shop.key, shop.shopId, from)).status).toBe(200);
    const before = c.queries();
    const answers = [];
    for (let i = 0; i < 40; i++) answers.push(await get(bogus('limited', i), shop.shopId, from));
    expect(answers.slice(0, BURST).map((a) => a.status)).toEqual(Array(BURST).fill(401));
    expect(answers.slice(BURST).map((a) => a.status)).toEqual(Array(40 - BURST).fill(429));
    expect(answers[BURST].retryAfter).toBe('1');
    expect(answers[BURST].body.error).toMatchObject({ code: 'rate_limited', fields: { authorization: expect.stringContaining('Not checked') } });
    expect(c.queries() - before).toBe(BURST);
    // The valid caller on the same address, its cache entry expired (1 ms TTL): refreshed, not refused.
    await new Promise((r) => setTimeout(r, 5));
    expect((await get(shop.key, shop.shopId, from)).status).toBe(200);
    // Another address has its own budget.
    expect((await get(bogus('limited', 100), shop.shopId, '198.51.100.8')).status).toBe(401);
    // Time gives the address its look-ups back, one a second.
    clock += 1_000;
    expect((await get(bogus('limited', 200), shop.shopId, from)).status).toBe(401);
    expect((await get(bogus('limited', 201), shop.shopId, from)).status).toBe(429);
  });

  it('concurrent unknown keys from one address cannot all pass the budget before their answers come back', async () => {
    const shop = await createTestShop(rt);
    const before = c.queries();
    const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => get(bogus('concurrent', i), shop.shopId, '198.51.100.20')));
    expect(answers.filter((a) => a.status === 401)).toHaveLength(BURST);
    expect(answers.filter((a) => a.status === 429)).toHaveLength(60 - BURST);
    expect(c.queries() - before).toBe(BURST);
  });

  it('a new valid key from a limited address is not checked either (429, which clients retry), and passes once the budget is back', async () => {
    const shop = await createTestShop(rt);
    const from = '198.51.100.9';
    for (let i = 0; i < BURST; i++) expect((await get(bogus('newkey', i), shop.shopId, from)).status).toBe(401);
    expect((await get(shop.key, shop.shopId, from)).status).toBe(429);
    clock += 1_000;
    expect((await get(shop.key, shop.shopId, from)).status).toBe(200);
  });
});

describe('the failed-authentication limiter keeps bounded memory', () => {
  it('tracks at most maxAddresses, forgetting refilled ones', () => {
    let now = 0;
    const limiter = new FailedAuthLimiter({ burst: 2, perMinute: 60, maxAddresses: 100, now: () => now });
    for (let i = 0; i < 5_000; i++) expect(limiter.take(`10.0.${i >> 8}.${i & 255}`)).toBe(0);
    expect(limiter.size).toBe(100);
    // The newest are limited after their second failure; an evicted one starts afresh.
    expect(limiter.take('10.0.19.135')).toBe(0);
    expect(limiter.take('10.0.19.135')).toBe(1);
    expect(limiter.take('10.0.0.0')).toBe(0);
    now += 60_000;
    expect(limiter.take('10.0.19.135')).toBe(0);
    expect(limiter.size).toBe(100);
  });

  it('counts an IPv6 /64 as one address, and IPv4-mapped IPv6 as IPv4', () => {
    expect(addressKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(addressKey('2001:0db8:0001:0002:ffff:ffff:ffff:ffff')).toBe('2001:db8:1:2::/64');
    expect(addressKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(addressKey('::1')).toBe('0:0:0:0::/64');
    expect(addressKey('::ffff:192.0.2.1')).toBe('192.0.2.1');
    expect(addressKey('192.0.2.1')).toBe('192.0.2.1');
  });
});
