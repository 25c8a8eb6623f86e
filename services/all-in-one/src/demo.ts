import { randomUUID } from 'node:crypto';
import { queryRow, sql } from '@shopstream/db';
import type { Runtime } from '@shopstream/runtime';

const demoRow = (r: Record<string, unknown>) => ({ shopId: String(r.shop_id), key: String(r.secret) });

/**
 * On the first embedded start (no BOOTSTRAP_API_KEYS), a demo shop and key, so a newcomer can post an
 * event at once. The secret is kept in the embedded database (table embedded_demo, migration
 * all-in-one/017_embedded_demo.sql) only so that every start can print it again.
 */
export async function ensureDemoKey(rt: Runtime): Promise<{ shopId: string; key: string; created: boolean }> {
  const demo = await queryRow(rt.db, sql`SELECT shop_id, secret FROM embedded_demo WHERE id = 1`, demoRow);
  if (demo) return { ...demo, created: false };
  const shopId = randomUUID();
  const { secret } = await rt.apiKeys.create([shopId], 'embedded demo');
  await rt.db.query(sql`INSERT INTO embedded_demo (id, shop_id, secret) VALUES (1, ${shopId}, ${secret})`);
  return { shopId, key: secret, created: true };
}
