import { queryRow, sql, type Queryable } from '@shopstream/db';
import { until } from './services.js';

/** How many of these activity ids have no row yet; with shopId, only that shop's rows are looked at. */
export async function missingActivities(db: Queryable, ids: string[], shopId?: string): Promise<number> {
  const shop = shopId === undefined ? sql`` : sql`shop_id = ${shopId} AND `;
  const n = await queryRow(db, sql`SELECT count(*)::int AS n FROM activities WHERE ${shop}id = ANY(${ids}::uuid[])`, (r) => Number(r.n));
  return ids.length - (n ?? 0);
}

/** Waits (120 s at most) until nothing is missing: when that was (epoch ms), or undefined if it never was. */
export async function whenCaughtUp(missing: () => Promise<number>): Promise<number | undefined> {
  try {
    await until(async () => (await missing()) === 0, 120_000, 'projection caught up', 250);
    return Date.now();
  } catch {
    return undefined;
  }
}
