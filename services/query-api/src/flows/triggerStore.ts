import { z } from 'zod';
import { newestFirst, queryRows, sql, type PageQuery, type Position, type Queryable } from '@shopstream/db';
import type { FlowTriggerEntry } from '@shopstream/contracts';

/** A row of flow_triggers (the flow matcher's read model) as the listing selects it. */
const triggerRow = z.object({
  id: z.string(),
  flow_id: z.string(),
  metric_event_id: z.string(),
  activity_id: z.string(),
  contact_id: z.string().nullable(),
  matched_at: z.union([z.date(), z.string()]).transform((d) => new Date(d).toISOString()),
  pos: z.string(),
});

const triggerOf = (row: unknown): FlowTriggerEntry & { position: Position } => {
  const { pos, ...t } = triggerRow.parse(row);
  return { ...t, position: [pos, t.id] };
};

/** Reads of a flow's triggers; every statement filters on shop_id. */
export const triggerStore = {
  /** A flow's triggers, newest first. */
  async page(db: Queryable, shopId: string, flowId: string, q: PageQuery) {
    const { bound, order } = newestFirst(sql`matched_at`, sql`id`, q);
    return queryRows(
      db,
      sql`
      SELECT id, flow_id, metric_event_id, activity_id, contact_id, matched_at, matched_at::text AS pos
      FROM flow_triggers WHERE shop_id = ${shopId} AND flow_id = ${flowId} ${bound} ${order} LIMIT ${q.take}`,
      triggerOf,
    );
  },
};
