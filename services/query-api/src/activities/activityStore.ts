import { z } from 'zod';
import { queryRow, queryRows, sql, type Queryable } from '@shopstream/db';
import { contactStore } from '@shopstream/contacts';
import { contactInOrder, metricInOrder, type Activity } from '@shopstream/contracts';
import { newestFirst, type PageQuery, type Position } from '../keysetPager.js';

const timestamp = z.union([z.date(), z.string()]).transform((d) => new Date(d).toISOString());

// jsonb stores keys in its own order: metricInOrder and contactInOrder give them back in the documented one.
type Doc = Record<string, unknown>;
const doc = z.record(z.string(), z.unknown());

/** A row of activities as `columns` selects it (and its keyset position, `pos`, in listings). */
const activityRow = z.object({
  id: z.string(),
  name: z.string(),
  description: z.string().nullable(),
  event_time: timestamp,
  recorded_at: timestamp,
  metric: doc.transform(metricInOrder),
  contact: doc.nullable().transform(contactInOrder),
  remote_id: z.string().nullable(),
  remote_platform: z.string().nullable(),
});
const activityOf = (row: unknown): Activity => {
  const r = activityRow.parse(row);
  return {
    id: r.id,
    name: r.name,
    description: r.description,
    event_time: r.event_time,
    recorded_at: r.recorded_at,
    metric: r.metric,
    contact: r.contact,
    remote_id: r.remote_id,
    remote_platform: r.remote_platform,
  };
};
const positioned = (row: unknown) => {
  const activity = activityOf(row);
  return { activity, position: [z.string().parse((row as Doc).pos), activity.id] as Position };
};

const columns = sql`a.id, a.name, a.description, a.event_time, a.recorded_at, a.metric, a.contact, a.remote_id, a.remote_platform`;

/** Reads of activities and timelines; every statement filters on shop_id. */
export const activityStore = {
  async get(db: Queryable, shopId: string, id: string): Promise<Activity | null> {
    return queryRow(db, sql`SELECT ${columns} FROM activities a WHERE a.shop_id = ${shopId} AND a.id = ${id}`, activityOf);
  },

  /** The shop's activities without a contact, newest recorded first (index activities_workspace). */
  async workspacePage(db: Queryable, shopId: string, q: PageQuery) {
    const { bound, order } = newestFirst(sql`a.recorded_at`, sql`a.id`, q);
    return queryRows(
      db,
      sql`
      SELECT ${columns}, a.recorded_at::text AS pos FROM activities a
      WHERE a.shop_id = ${shopId} AND a.contact_id IS NULL ${bound} ${order} LIMIT ${q.take}`,
      positioned,
    );
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

  /**
   * A contact's activities, newest event_time first (index contact_timeline_order). activities is named
   * first: a statement locks its tables in the order it names them, and a rebuild's switch locks them in the
   * projection's order (activities, contact_timeline); the other order deadlocks with it.
   */
  async timelinePage(db: Queryable, shopId: string, contactId: string, q: PageQuery) {
    const { bound, order } = newestFirst(sql`t.event_time`, sql`t.activity_id`, q);
    return queryRows(
      db,
      sql`
      SELECT ${columns}, t.event_time::text AS pos FROM activities a
      JOIN contact_timeline t ON a.shop_id = t.shop_id AND a.id = t.activity_id
      WHERE t.shop_id = ${shopId} AND t.contact_id = ${contactId} ${bound} ${order} LIMIT ${q.take}`,
      positioned,
    );
  },
};
