import { randomUUID } from 'node:crypto';
import { sql } from '@shopstream/db';
import type { Runtime } from '@shopstream/runtime';

/**
 * On the first embedded start (no BOOTSTRAP_API_KEYS), a demo shop and key, so a newcomer can post an
 * event at once. The secret is kept in the embedded database only so that every start can print it again.
 */
export async function ensureDemoKey(rt: Runtime): Promise<{ shopId: string; key: string; created: boolean }> {
  await rt.db.query(sql`CREATE TABLE IF NOT EXISTS embedded_demo (id int PRIMARY KEY CHECK (id = 1), shop_id uuid NOT NULL, secret text NOT NULL)`);
  const rows = await rt.db.query(sql`SELECT shop_id, secret FROM embedded_demo WHERE id = 1`);
  if (rows.length > 0) return { shopId: rows[0].shop_id, key: rows[0].secret, created: false };
  const shopId = randomUUID();
  const { secret } = await rt.apiKeys.create([shopId], 'embedded demo');
  await rt.db.query(sql`INSERT INTO embedded_demo (id, shop_id, secret) VALUES (1, ${shopId}, ${secret})`);
  return { shopId, key: secret, created: true };
}
