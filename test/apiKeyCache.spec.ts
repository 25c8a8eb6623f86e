import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '@shopstream/db';
import { ApiKeyStore } from '@shopstream/http';
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
    for (let round = 0; round < 5; round++) for (let i = 0; i < 500; i++) expect(await store.resolve(`ssk_bogus_${i}`)).toBeNull();
    expect(c.queries()).toBe(1 + 500);
    // Past the negative cache's 10,000 entries: the oldest bogus secrets go, the known key stays.
    for (let i = 0; i < 10_500; i++) await store.resolve(`ssk_flood_${i}`);
    const before = c.queries();
    expect(await store.resolve(shop.key)).not.toBeNull();
    expect(c.queries()).toBe(before);
    // The newest misses are still cached; the oldest were evicted and cost a query again.
    await store.resolve('ssk_flood_10499');
    expect(c.queries()).toBe(before);
    await store.resolve('ssk_bogus_0');
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
