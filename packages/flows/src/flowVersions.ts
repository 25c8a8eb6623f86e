import { z } from 'zod';
import { queryRows, sql, type Queryable } from '@shopstream/db';

/** One state of a flow, from valid_from until the next version (008_flow_versions.sql). */
const flowVersionRow = z.object({
  seq: z.coerce.number(),
  shop_id: z.string(),
  flow_id: z.string(),
  valid_from: z.union([z.date(), z.string()]).transform((d) => new Date(d).getTime()),
  status: z.enum(['active', 'paused', 'deleted']),
  metric_name: z.string(),
  /** As stored: the reader validates them (a version edited by hand may not parse). */
  property_conditions: z.unknown(),
  contact_conditions: z.unknown(),
});
export type FlowVersionRow = z.infer<typeof flowVersionRow>;

/** Every version of every flow, in the order they took effect, with the database's time of the read. */
export const flowVersions = {
  async all(db: Queryable): Promise<{ now: number; versions: FlowVersionRow[] }> {
    const [{ now }] = await db.query(sql`SELECT now() AS now`);
    const versions = await queryRows(
      db,
      sql`
      SELECT seq, shop_id, flow_id, valid_from, status, metric_name, property_conditions, contact_conditions
      FROM flow_versions ORDER BY valid_from, seq`,
      flowVersionRow,
    );
    return { now: new Date(now as Date | string).getTime(), versions };
  },
  /**
   * The database's time and a stamp of the table (highest seq and count): flow_versions only grows (a trigger
   * appends, nothing updates or deletes), so an unchanged stamp means unchanged rows.
   */
  async stamp(db: Queryable): Promise<{ now: number; stamp: string }> {
    const [r] = await db.query(sql`SELECT now() AS now, coalesce(max(seq), 0)::text || '/' || count(*)::text AS stamp FROM flow_versions`);
    return { now: new Date(r.now as Date | string).getTime(), stamp: String(r.stamp) };
  },
};
