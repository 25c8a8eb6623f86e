import { describe, expect, it } from 'vitest';
import { activityId, activityKey } from './activityId.js';
import { v5 as uuidv5 } from 'uuid';

const shop = '5b0c6b7e-2f7a-4c1e-9a57-0d7f1f0b2a11';
const metric = { metric_name: 'placed_order' };

describe('activityKey', () => {
  it('is (remote_platform or "", remote_id) when remote_id is given, whatever the deduping_key', () => {
    expect(activityKey({ remote_id: 'o-1', remote_platform: 'shopify', metric: { ...metric, deduping_key: 'd' } })).toBe('["remote","shopify","o-1"]');
    expect(activityKey({ remote_id: 'o-1', remote_platform: null, metric })).toBe('["remote","","o-1"]');
    expect(activityKey({ remote_id: 'o-1', metric })).toBe('["remote","","o-1"]');
  });

  it('is (metric_name, deduping_key) without a remote_id, and null without either', () => {
    expect(activityKey({ remote_id: null, metric: { ...metric, deduping_key: 'd-1' } })).toBe('["dedupe","placed_order","d-1"]');
    expect(activityKey({ metric })).toBeNull();
    expect(activityKey({ remote_id: null, remote_platform: 'shopify', metric })).toBeNull();
  });

  it('cannot be forged across the two kinds or by separators', () => {
    expect(activityKey({ remote_id: 'b', remote_platform: 'a', metric })).not.toBe(activityKey({ metric: { metric_name: 'a', deduping_key: 'b' } }));
    expect(activityKey({ remote_id: 'b:c', remote_platform: 'a', metric })).not.toBe(activityKey({ remote_id: 'c', remote_platform: 'a:b', metric }));
  });
});

describe('activityId', () => {
  it('is a UUIDv5 of the key in the shop: the same for every replay, another in another shop', () => {
    const key = '["remote","","o-1"]';
    const id = activityId(shop, key);
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(activityId(shop, key)).toBe(id);
    expect(activityId('0e1d9a43-8f0e-4d5b-bb6b-3c1e2b7b9c01', key)).not.toBe(id);
  });

  it("is uuid's v5 of the key in the shop's namespace, byte for byte: the ids of records written by every earlier version", () => {
    for (const key of ['["remote","","o-1"]', '["dedupe","Placed Order","ключ-🛒"]', '["remote","shopify","' + 'x'.repeat(2_000) + '"]']) {
      expect(activityId(shop, key)).toBe(uuidv5(key, shop));
    }
  });

  it('is a new UUIDv7 for an unkeyed event', () => {
    const a = activityId(shop, null);
    const b = activityId(shop, null);
    expect(a).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(a).not.toBe(b);
  });
});
