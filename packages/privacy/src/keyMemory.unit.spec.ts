import { describe, expect, it } from 'vitest';
import { BroadcastChannel } from 'node:worker_threads';
import { newKeyBytes } from './aead.js';
import { KeyCache } from './dataKeys.js';
import { forgetErasedKeys, KEY_TTL_MS, KeyMemory } from './keyMemory.js';
import { keyringOf } from './keyring.js';

/** A clock the test moves. */
const clock = () => {
  let t = 1_000;
  return { now: () => t, pass: (ms: number) => (t += ms) };
};

describe('KeyMemory: how long a data key stays in a process', () => {
  it('keeps a key for its TTL from when it was put, however often it is read', () => {
    const c = clock();
    const m = new KeyMemory<string>({ ttlMs: 1_000, now: c.now });
    m.set('a', 'key a');
    c.pass(999);
    expect(m.get('a')).toBe('key a');
    c.pass(1);
    expect(m.get('a')).toBeUndefined();
    expect(m.size).toBe(0);
  });

  it('drops expired keys when another is put or on a sweep, not only when they are read', () => {
    const c = clock();
    const m = new KeyMemory<string>({ ttlMs: 1_000, now: c.now });
    m.set('a', 'key a');
    m.set('b', 'key b');
    c.pass(500);
    m.set('c', 'key c');
    c.pass(500);
    m.set('d', 'key d');
    expect(m.size).toBe(2);
    c.pass(500);
    m.sweep();
    expect(m.size).toBe(1);
    expect(m.get('d')).toBe('key d');
  });

  it('holds at most `max` keys, the oldest dropped first; putting a key again restarts its time', () => {
    const c = clock();
    const m = new KeyMemory<string>({ ttlMs: 1_000, max: 2, now: c.now });
    m.set('a', 'key a');
    m.set('b', 'key b');
    c.pass(600);
    m.set('a', 'key a');
    m.set('c', 'key c');
    expect([m.get('a'), m.get('b'), m.get('c')]).toEqual(['key a', undefined, 'key c']);
    c.pass(600);
    expect(m.get('a')).toBe('key a');
  });

  it('forgets an erased contact in every cache of the process, by key id and by shop and contact', () => {
    const byContact = new KeyMemory<string>();
    const byKeyId = new KeyMemory<string>();
    byContact.set('shop-1/contact-1', 'k1');
    byContact.set('shop-1/contact-2', 'k2');
    byKeyId.set('key-1', 'k1');
    byKeyId.set('key-2', 'k2');
    forgetErasedKeys('shop-1', [{ contactId: 'contact-1', keyId: 'key-1' }]);
    expect([byContact.get('shop-1/contact-1'), byKeyId.get('key-1')]).toEqual([undefined, undefined]);
    expect([byContact.get('shop-1/contact-2'), byKeyId.get('key-2')]).toEqual(['k2', 'k2']);
  });

  it('is five minutes by default', () => {
    expect(KEY_TTL_MS).toBe(300_000);
  });
});

describe('KeyCache', () => {
  const fresh = () => newKeyBytes(1)[0];
  const master = fresh();
  const row = (keyring: ReturnType<typeof keyringOf>, key: Buffer) => {
    const shop = '0b8f4a8e-1c7e-4f7e-9a51-3f3f1c9d0001';
    const contact = '0b8f4a8e-1c7e-4f7e-9a51-3f3f1c9d0002';
    const keyId = '0b8f4a8e-1c7e-4f7e-9a51-3f3f1c9d0003';
    const { masterId, wrapped } = keyring.wrap(key, `contact-key/${shop}/${contact}/${keyId}`);
    return { shop_id: shop, contact_id: contact, key_id: keyId, master_id: masterId, wrapped };
  };

  it('unwraps a row once, then serves it from memory until its TTL is over', async () => {
    const c = clock();
    const keyring = keyringOf([master]);
    let unwraps = 0;
    const counting = { ...keyring, unwrap: (...a: Parameters<typeof keyring.unwrap>) => (unwraps++, keyring.unwrap(...a)) };
    const cache = new KeyCache(counting, { ttlMs: 1_000, now: c.now });
    const key = fresh();
    const r = row(keyring, key);
    // KeyObjects: compared by their bytes (toEqual would find any two keys equal).
    expect((await cache.unwrap(r)).export().equals(key)).toBe(true);
    expect(cache.unwrapNow(r)).toBe(await cache.unwrap(r));
    expect(unwraps).toBe(1);
    c.pass(1_000);
    expect(cache.unwrapNow(r).export().equals(key)).toBe(true);
    expect(unwraps).toBe(2);
  });

  it('reads the master keys again before unwrapping a row of a master key it does not hold', async () => {
    const rotated = fresh();
    const keyring = keyringOf([master]);
    let reloads = 0;
    const reloading = {
      ...keyring,
      knows: (id: string) => reloads > 0 || keyring.knows(id),
      reload: async () => {
        reloads++;
      },
    };
    const cache = new KeyCache(reloading);
    await cache.prepare([row(keyring, fresh())]);
    expect(reloads).toBe(0);
    await cache.prepare([row(keyringOf([rotated]), fresh())]);
    expect(reloads).toBe(1);
  });
});

describe('an erasure in another thread of the process', () => {
  it('is told to every thread: a cache here forgets what a message on the channel names, and forgetErasedKeys sends one', async () => {
    const here = new KeyMemory<string>();
    here.set('shop-2/contact-1', 'k1');
    here.set('key-9', 'k9');
    here.set('shop-2/contact-2', 'k2');
    // Another thread's erasure, as it arrives here (a BroadcastChannel reaches every other instance of its name).
    const other = new BroadcastChannel('shopstream:privacy:erased-keys');
    other.postMessage({ shopId: 'shop-2', erased: [{ contactId: 'contact-1', keyId: 'key-9' }] });
    await expect.poll(() => [here.get('shop-2/contact-1'), here.get('key-9')]).toEqual([undefined, undefined]);
    expect(here.get('shop-2/contact-2')).toBe('k2');

    const told = new Promise<unknown>((resolve) => {
      other.onmessage = (e) => resolve((e as { data: unknown }).data);
    });
    forgetErasedKeys('shop-2', [{ contactId: 'contact-2', keyId: null }]);
    expect(await told).toEqual({ shopId: 'shop-2', erased: [{ contactId: 'contact-2', keyId: null }] });
    other.close();
  });
});
