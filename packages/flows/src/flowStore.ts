import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { newestFirst, queryRow, queryRows, sql, type PageQuery, type Position, type Queryable } from '@shopstream/db';
import type { ContactCondition, Flow, FlowCreate, FlowStatus, FlowTrigger, FlowUpdate, PropertyCondition } from '@shopstream/contracts';

const timestamp = z.union([z.date(), z.string()]).transform((d) => new Date(d).toISOString());
const conditions = z.array(z.record(z.string(), z.unknown()));

/** A row of `flows` as flowColumns selects it. */
const flowRow = z.object({
  id: z.string(),
  name: z.string(),
  status: z.enum(['active', 'paused']),
  metric_name: z.string(),
  property_conditions: conditions,
  contact_conditions: conditions,
  created_at: timestamp,
  updated_at: timestamp,
  pos: z.string(),
});

// jsonb stores keys in its own order: give conditions back as {field, op, value}. Stored conditions were
// validated on the way in; they are returned as stored.
const conditionOf = <C>({ field, op, ...rest }: Record<string, unknown>) => ({ field, op, ...rest }) as C;

/** A flow with its keyset position (newest first by created_at, id). */
export type PositionedFlow = Flow & { position: Position };

const flowOf = (row: unknown): PositionedFlow => {
  const r = flowRow.parse(row);
  const trigger: FlowTrigger = {
    metric_name: r.metric_name,
    property_conditions: r.property_conditions.map(conditionOf<PropertyCondition>),
    contact_conditions: r.contact_conditions.map(conditionOf<ContactCondition>),
  };
  return { id: r.id, name: r.name, status: r.status, trigger, created_at: r.created_at, updated_at: r.updated_at, position: [r.pos, r.id] };
};

const flowColumns = sql`id, name, status, metric_name, property_conditions, contact_conditions, created_at, updated_at, created_at::text AS pos`;

/**
 * The flows write model (tables flows and flow_versions, packages/flows/migrations/): what query-api's /flows/ routes and
 * `pnpm cli flows` call. Flows of one shop; every statement filters on shop_id. A write leaves its version in
 * flow_versions (a trigger), which the flow matcher reads through `flowVersions`.
 */
export const flowStore = {
  async create(db: Queryable, shopId: string, f: FlowCreate): Promise<Flow> {
    const flow = await queryRow(
      db,
      sql`
      INSERT INTO flows (shop_id, id, name, status, metric_name, property_conditions, contact_conditions)
      VALUES (${shopId}, ${randomUUID()}, ${f.name}, ${f.status}, ${f.trigger.metric_name},
              ${JSON.stringify(f.trigger.property_conditions)}::jsonb, ${JSON.stringify(f.trigger.contact_conditions)}::jsonb)
      RETURNING ${flowColumns}`,
      flowOf,
    );
    return strip(flow!);
  },

  async get(db: Queryable, shopId: string, id: string): Promise<Flow | null> {
    const flow = await queryRow(db, sql`SELECT ${flowColumns} FROM flows WHERE shop_id = ${shopId} AND id = ${id} AND deleted_at IS NULL`, flowOf);
    return flow && strip(flow);
  },

  /** Newest first. */
  async page(db: Queryable, shopId: string, q: PageQuery & { status?: FlowStatus }): Promise<PositionedFlow[]> {
    const status = q.status ? sql`AND status = ${q.status}` : sql``;
    const { bound, order } = newestFirst(sql`created_at`, sql`id`, q);
    return queryRows(
      db,
      sql`SELECT ${flowColumns} FROM flows WHERE shop_id = ${shopId} AND deleted_at IS NULL ${status} ${bound} ${order} LIMIT ${q.take}`,
      flowOf,
    );
  },

  async update(db: Queryable, shopId: string, id: string, u: FlowUpdate): Promise<Flow | null> {
    const sets = [sql`updated_at = now()`];
    if (u.name !== undefined) sets.push(sql`name = ${u.name}`);
    if (u.status !== undefined) sets.push(sql`status = ${u.status}`);
    if (u.trigger !== undefined) {
      sets.push(sql`metric_name = ${u.trigger.metric_name}`);
      sets.push(sql`property_conditions = ${JSON.stringify(u.trigger.property_conditions)}::jsonb`);
      sets.push(sql`contact_conditions = ${JSON.stringify(u.trigger.contact_conditions)}::jsonb`);
    }
    const flow = await queryRow(
      db,
      sql`UPDATE flows SET ${sql.join(sets, sql`, `)} WHERE shop_id = ${shopId} AND id = ${id} AND deleted_at IS NULL RETURNING ${flowColumns}`,
      flowOf,
    );
    return flow && strip(flow);
  },

  /** Soft delete: the flow stops matching and disappears from the API; its triggers stay in flow_triggers. */
  async remove(db: Queryable, shopId: string, id: string): Promise<boolean> {
    const rows = await db.query(
      sql`UPDATE flows SET deleted_at = now(), updated_at = now() WHERE shop_id = ${shopId} AND id = ${id} AND deleted_at IS NULL RETURNING id`,
    );
    return rows.length > 0;
  },
};

/** The API shape: without the keyset position. */
export function strip<T extends { position: Position }>(row: T): Omit<T, 'position'> {
  const { position: _p, ...rest } = row;
  return rest;
}
