import { randomUUID } from 'node:crypto';
import { sql, type Queryable } from '@shopstream/db';
import type { Flow, FlowCreate, FlowStatus, FlowTrigger, FlowTriggerEntry, FlowUpdate } from '@shopstream/contracts';
import { keysetOrder, type PageQuery, type Position } from '../keysetPager.js';

const iso = (d: Date | string) => new Date(d).toISOString();

// jsonb stores keys in its own order: give conditions back as {field, op, value}.
const conditionOf = ({ field, op, ...rest }: any) => ({ field, op, ...rest });

export function flowOf(r: any): Flow & { position: Position } {
  const trigger: FlowTrigger = { metric_name: r.metric_name, property_conditions: r.property_conditions.map(conditionOf), contact_conditions: r.contact_conditions.map(conditionOf) };
  return { id: r.id, name: r.name, status: r.status, trigger, created_at: iso(r.created_at), updated_at: iso(r.updated_at), position: [r.pos, r.id] };
}

const flowColumns = sql`id, name, status, metric_name, property_conditions, contact_conditions, created_at, updated_at, created_at::text AS pos`;

/** Flows of one shop; every statement filters on shop_id. */
export const flowStore = {
  async create(db: Queryable, shopId: string, f: FlowCreate): Promise<Flow> {
    const rows = await db.query(sql`
      INSERT INTO flows (shop_id, id, name, status, metric_name, property_conditions, contact_conditions)
      VALUES (${shopId}, ${randomUUID()}, ${f.name}, ${f.status}, ${f.trigger.metric_name},
              ${JSON.stringify(f.trigger.property_conditions)}::jsonb, ${JSON.stringify(f.trigger.contact_conditions)}::jsonb)
      RETURNING ${flowColumns}`);
    return strip(flowOf(rows[0]));
  },

  async get(db: Queryable, shopId: string, id: string): Promise<Flow | null> {
    const rows = await db.query(sql`SELECT ${flowColumns} FROM flows WHERE shop_id = ${shopId} AND id = ${id} AND deleted_at IS NULL`);
    return rows.length === 0 ? null : strip(flowOf(rows[0]));
  },

  /** Newest first. */
  async page(db: Queryable, shopId: string, q: PageQuery & { status?: FlowStatus }) {
    const status = q.status ? sql`AND status = ${q.status}` : sql``;
    const { bound, order } = keysetOrder(sql`created_at`, sql`id`, q, 'desc');
    const rows = await db.query(sql`SELECT ${flowColumns} FROM flows WHERE shop_id = ${shopId} AND deleted_at IS NULL ${status} AND ${bound} ${order} LIMIT ${q.take}`);
    return rows.map(flowOf);
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
    const rows = await db.query(sql`
      UPDATE flows SET ${sql.join(sets, sql`, `)} WHERE shop_id = ${shopId} AND id = ${id} AND deleted_at IS NULL RETURNING ${flowColumns}`);
    return rows.length === 0 ? null : strip(flowOf(rows[0]));
  },

  /** Soft delete: the flow stops matching and disappears from the API; its triggers stay in flow_triggers. */
  async remove(db: Queryable, shopId: string, id: string): Promise<boolean> {
    const rows = await db.query(sql`UPDATE flows SET deleted_at = now(), updated_at = now() WHERE shop_id = ${shopId} AND id = ${id} AND deleted_at IS NULL RETURNING id`);
    return rows.length > 0;
  },

  /** A flow's triggers, newest first. */
  async triggerPage(db: Queryable, shopId: string, flowId: string, q: PageQuery) {
    const { bound, order } = keysetOrder(sql`matched_at`, sql`id`, q, 'desc');
    const rows = await db.query(sql`
      SELECT id, flow_id, metric_event_id, activity_id, contact_id, matched_at, matched_at::text AS pos
      FROM flow_triggers WHERE shop_id = ${shopId} AND flow_id = ${flowId} AND ${bound} ${order} LIMIT ${q.take}`);
    return rows.map((r): FlowTriggerEntry & { position: Position } => ({
      id: r.id,
      flow_id: r.flow_id,
      metric_event_id: r.metric_event_id,
      activity_id: r.activity_id,
      contact_id: r.contact_id,
      matched_at: iso(r.matched_at),
      position: [r.pos, r.id],
    }));
  },
};

/** The API shape: without the keyset position. */
export function strip<T extends { position: Position }>(row: T): Omit<T, 'position'> {
  const { position: _p, ...rest } = row;
  return rest;
}
