import { queryRow, sql, type Queryable } from '@shopstream/db';
import { contactStore } from '@shopstream/ingest-api';
import type { Activity } from '@shopstream/contracts';
import { newestFirst, type PageQuery, type Position } from '../keysetPager.js';

const iso = (d: Date | string) => new Date(d).toISOString();

// jsonb stores keys in its own order: give them back in the documented one.
const metricOf = (m: any): Activity['metric'] => ({
  metric_name: m.metric_name,
  value: m.value,
  additional_properties: m.additional_properties,
  context_object_id: m.context_object_id,
  context_object_type: m.context_object_type,
  metric_object_id: m.metric_object_id,
  metric_object_type: m.metric_object_type,
  deduping_key: m.deduping_key,
});
const contactOf = (c: any): Activity['contact'] => (c === null ? null : { id: c.id, email: c.email, phone: c.phone, remote_id: c.remote_id, name: c.name });

function activityOf(r: any): Activity {
  return {
    id: r.id,
    name: r.name,
    description: r.description,
    event_time: iso(r.event_time),
    recorded_at: iso(r.recorded_at),
    metric: metricOf(r.metric),
    contact: contactOf(r.contact),
    remote_id: r.remote_id,
    remote_platform: r.remote_platform,
  };
}

const columns = sql`a.id, a.name, a.description, a.event_time, a.recorded_at, a.metric, a.contact, a.remote_id, a.remote_platform`;

/** Reads of activities and timelines; every statement filters on shop_id. */
export const activityStore = {
  async get(db: Queryable, shopId: string, id: string): Promise<Activity | null> {
    const rows = await db.query(sql`SELECT ${columns} FROM activities a WHERE a.shop_id = ${shopId} AND a.id = ${id}`);
    return rows.length === 0 ? null : activityOf(rows[0]);
  },

  /** The shop's activities without a contact, newest recorded first (index activities_workspace). */
  async workspacePage(db: Queryable, shopId: string, q: PageQuery) {
    const { bound, order } = newestFirst(sql`a.recorded_at`, sql`a.id`, q);
    const rows = await db.query(sql`
      SELECT ${columns}, a.recorded_at::text AS pos FROM activities a
      WHERE a.shop_id = ${shopId} AND a.contact_id IS NULL ${bound} ${order} LIMIT ${q.take}`);
    return rows.map((r) => ({ activity: activityOf(r), position: [r.pos, r.id] as Position }));
  },

  async contactKnown(db: Queryable, shopId: string, contactId: string): Promise<boolean> {
    // A contact ingest resolved, or one only the timeline knows (its activities outlived the contact row).
    const known = await queryRow(
      db,
      sql`
      SELECT ${contactStore.exists(shopId, contactId)}
          OR EXISTS (SELECT 1 FROM contact_timeline WHERE shop_id = ${shopId} AND contact_id = ${contactId}) AS known`,
      (r) => r.known === true,
    );
    return known === true;
  },

  /** A contact's activities, newest event_time first (index contact_timeline_order). */
  async timelinePage(db: Queryable, shopId: string, contactId: string, q: PageQuery) {
    const { bound, order } = newestFirst(sql`t.event_time`, sql`t.activity_id`, q);
    const rows = await db.query(sql`
      SELECT ${columns}, t.event_time::text AS pos FROM contact_timeline t
      JOIN activities a ON a.shop_id = t.shop_id AND a.id = t.activity_id
      WHERE t.shop_id = ${shopId} AND t.contact_id = ${contactId} ${bound} ${order} LIMIT ${q.take}`);
    return rows.map((r) => ({ activity: activityOf(r), position: [r.pos, r.id] as Position }));
  },
};
