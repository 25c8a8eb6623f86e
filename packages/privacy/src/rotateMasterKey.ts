import { queryRows, sql, type Db } from '@shopstream/db';
import type { Keyring } from './keyring.js';

const BATCH = 1_000;

/**
 * Re-wraps every data key (and every waiting job's sealed identifier) that is not under the keyring's current
 * master key, in batches of one transaction each; data keys themselves do not change, so nothing on the log is
 * rewritten. Run after putting the new key first in PRIVACY_MASTER_KEY (or the key file) everywhere; once it
 * reports 0 left, the old key may be dropped. Returns how many it re-wrapped.
 */
export async function rotateMasterKey(db: Db, keyring: Keyring, progress: (n: number) => void = () => {}): Promise<{ keys: number; jobs: number }> {
  const current = keyring.currentId;
  let keys = 0;
  for (;;) {
    const n = await db.tx(async (tx) => {
      const rows = await queryRows(
        tx,
        sql`SELECT shop_id, contact_id, key_id, master_id, wrapped FROM contact_keys WHERE master_id <> ${current} LIMIT ${BATCH} FOR UPDATE SKIP LOCKED`,
        (r) => ({ shop: String(r.shop_id), contact: String(r.contact_id), keyId: String(r.key_id), master: String(r.master_id), wrapped: String(r.wrapped) }),
      );
      for (const r of rows) {
        const aad = `contact-key/${r.shop}/${r.contact}/${r.keyId}`;
        const next = keyring.wrap(keyring.unwrap(r.master, r.wrapped, aad), aad);
        await tx.query(
          sql`UPDATE contact_keys SET master_id = ${next.masterId}, wrapped = ${next.wrapped} WHERE shop_id = ${r.shop} AND contact_id = ${r.contact}`,
        );
      }
      return rows.length;
    });
    keys += n;
    progress(keys);
    if (n < BATCH) break;
  }
  const jobs = await db.tx(async (tx) => {
    const rows = await queryRows(
      tx,
      sql`SELECT shop_id, id, identifier_master, identifier_sealed FROM erasure_jobs
          WHERE identifier_sealed IS NOT NULL AND identifier_master <> ${current} FOR UPDATE`,
      (r) => ({ shop: String(r.shop_id), id: String(r.id), master: String(r.identifier_master), sealed: String(r.identifier_sealed) }),
    );
    for (const r of rows) {
      const aad = `erasure-job/${r.shop}/${r.id}`;
      const next = keyring.wrap(keyring.unwrap(r.master, r.sealed, aad), aad);
      await tx.query(
        sql`UPDATE erasure_jobs SET identifier_master = ${next.masterId}, identifier_sealed = ${next.wrapped} WHERE shop_id = ${r.shop} AND id = ${r.id}`,
      );
    }
    return rows.length;
  });
  // Everything is under the configured key now: the key the database kept until one was configured can go.
  if (!keyring.fromDatabase) await db.query(sql`DELETE FROM privacy_master_keys`);
  return { keys, jobs };
}
