import { Worker } from 'node:worker_threads';
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { EventRecord, ResolvedContact } from '@shopstream/contracts';
import { keyringOf, makeDataKeys, sealedValue, sealHere, unsealedEventRecord, unwrapTaskOf, type KeyRow } from '@shopstream/privacy';
import { newKey, open } from '@shopstream/privacy/aead';
import { createLogger } from '@shopstream/telemetry';
import { SEAL_ELSEWHERE_MIN, SealPool, spawnSealWorker } from './sealPool.js';

const shop = randomUUID();
const record = (n: number): EventRecord & { contact: ResolvedContact } => ({
  activity_id: randomUUID(),
  shop_id: shop,
  activity_key: `key-${n}`,
  name: `Placed Order ${n}`,
  description: null,
  event_time: '2026-11-27T10:00:00.000Z',
  received_at: '2026-11-27T10:00:01.000Z',
  remote_id: null,
  remote_platform: null,
  metric: {
    metric_name: 'Placed Order',
    value: n,
    additional_properties: { items: [n, 'ünïcode'] },
    context_object_id: null,
    context_object_type: null,
    metric_object_id: null,
    metric_object_type: null,
    deduping_key: null,
  },
  contact: { id: randomUUID(), email: `p${n}@example.com`, phone: null, remote_id: `r-${n}`, name: null },
  request_id: `req-${n}`,
});

const logger = createLogger('seal-pool-test', 'silent');
const keyring = keyringOf([newKey()]);

describe('the ingest seal worker (sealPool.ts)', () => {
  it("seals a bulk's records in the worker into values that open under each record's key, as sealed on the event loop", async () => {
    const pool = new SealPool(logger);
    try {
      const records = Array.from({ length: SEAL_ELSEWHERE_MIN + 3 }, (_, n) => record(n));
      const unsealed = records.map((r) => unsealedEventRecord({ keyId: randomUUID(), key: newKey() }, r));
      const parts = await pool.seal(unsealed);
      expect(parts).toHaveLength(unsealed.length);
      parts!.forEach((part, i) => {
        const value = JSON.parse(String(sealedValue(unsealed[i], part)));
        const here = JSON.parse(String(sealedValue(unsealed[i], sealHere(unsealed[i]))));
        // The same record field for field (and in the same order) but the nonce and ciphertext.
        expect(Object.keys(value)).toEqual(Object.keys(here));
        expect({ ...value, sealed: { ...value.sealed, iv: '', data: '' } }).toEqual({ ...here, sealed: { ...here.sealed, iv: '', data: '' } });
        expect(value.sealed.key_id).toBe(unsealed[i].dataKey.keyId);
        expect(JSON.stringify(value)).not.toContain(records[i].contact.email);
        const opened = JSON.parse(open(unsealed[i].dataKey.key, value.sealed, unsealed[i].aad).toString('utf8'));
        expect(opened).toEqual({
          name: records[i].name,
          description: null,
          additional_properties: records[i].metric.additional_properties,
          contact: { email: records[i].contact.email, phone: null, remote_id: records[i].contact.remote_id, name: null },
        });
      });
      // Too few for the round trip: left to the event loop.
      expect(await pool.seal(unsealed.slice(0, SEAL_ELSEWHERE_MIN - 1))).toBeUndefined();
    } finally {
      await pool.close();
    }
  });

  it('unwraps data keys in the worker to the keys the keyring unwraps, and rejects a key that does not open', async () => {
    const pool = new SealPool(logger);
    try {
      const made = makeDataKeys(
        keyring,
        Array.from({ length: 12 }, () => ({ shop, contact: randomUUID() })),
      );
      const rows: KeyRow[] = made.map((m) => ({ shop_id: m.shop, contact_id: m.contact, key_id: m.keyId, master_id: m.masterId, wrapped: m.wrapped }));
      const keys = await pool.unwrap(unwrapTaskOf(keyring, rows));
      expect(keys.map((k) => k.toString('hex'))).toEqual(made.map((m) => m.key.toString('hex')));
      // A row moved to another contact is bound to its own: it does not open there.
      const moved = { ...rows[0], contact_id: randomUUID() };
      await expect(pool.unwrap(unwrapTaskOf(keyring, [moved]))).rejects.toThrow();
    } finally {
      await pool.close();
    }
  });

  it('a worker that ends leaves its batch to the event loop (nothing lost), and the next batch starts another', async () => {
    let spawned = 0;
    // The first worker ends on its first message; the ones after it are real.
    const pool = new SealPool(logger, () => {
      spawned++;
      return spawned === 1
        ? new Worker("require('node:worker_threads').parentPort.on('message', () => process.exit(3))", { eval: true })
        : spawnSealWorker();
    });
    try {
      const unsealed = Array.from({ length: SEAL_ELSEWHERE_MIN }, (_, n) => unsealedEventRecord({ keyId: randomUUID(), key: newKey() }, record(n)));
      expect(await pool.seal(unsealed)).toBeUndefined();
      const parts = await pool.seal(unsealed);
      expect(spawned).toBe(2);
      expect(parts).toHaveLength(unsealed.length);
      expect(open(unsealed[0].dataKey.key, parts![0], unsealed[0].aad).length).toBeGreaterThan(0);
    } finally {
      await pool.close();
    }
  });
});
