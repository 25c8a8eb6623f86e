import { activityListQuerySchema, activityPageSchema, activitySchema, pageQuerySchema } from '@shopstream/contracts';
import { ApiError, defineRoute, mountRoutes, uuidPathParam } from '@shopstream/http';
import type { QueryContext } from '../index.js';
import { keysetPager } from '../keysetPager.js';
import { activityStore } from './activityStore.js';

/** Reads of activities and contact timelines. */
export function activityRoutes(rt: QueryContext) {
  const page = keysetPager(rt);
  const tags = ['Activities'];
  return mountRoutes([
    defineRoute({
      method: 'get',
      path: '/v2026-04/activities/{id}/',
      operationId: 'getActivity',
      summary: 'Get an Activity',
      tags,
      params: { id: uuidPathParam('The activity id the event endpoints answered.') },
      responses: { 200: { description: 'The Activity.', schema: activitySchema } },
      errors: [400, 401, 403, 404],
      async handler(req, res, { params: { id } }) {
        // Not yet projected, another shop's, or not an id at all: the same answer, so nothing leaks across shops.
        const activity = id === null ? null : await activityStore.get(rt.db, req.shopId, id);
        if (!activity) throw new ApiError('not_found', 'No such activity in this shop (yet: it appears shortly after the event is accepted).');
        res.json(activity);
      },
    }),
    defineRoute({
      method: 'get',
      path: '/v2026-04/activities/',
      operationId: 'listActivities',
      summary: "The workspace's activities (those without a contact), newest first",
      tags,
      query: activityListQuerySchema,
      responses: { 200: { description: 'A page of activities.', schema: activityPageSchema } },
      errors: [400, 401, 403],
      async handler(req, res, { query: q }) {
        const activities = await page(req, q, {
          list: 'activities',
          filters: { scope: q.scope },
          fetch: (p) => activityStore.workspacePage(rt.db, req.shopId, p),
          present: (rows) => rows.map((r) => r.activity),
        });
        res.json(activities);
      },
    }),
    defineRoute({
      method: 'get',
      path: '/v2026-04/contacts/{contact_id}/timeline/',
      operationId: 'listContactTimeline',
      summary: "A contact's timeline, newest event_time first",
      tags,
      params: { contact_id: uuidPathParam('The contact id the event endpoints answered.') },
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of activities.', schema: activityPageSchema } },
      errors: [400, 401, 403, 404],
      async handler(req, res, { params: { contact_id: contactId }, query: q }) {
        if (contactId === null || !(await activityStore.contactKnown(rt.db, req.shopId, contactId))) {
          throw new ApiError('not_found', 'No such contact in this shop.');
        }
        const timeline = await page(req, q, {
          list: 'timeline',
          filters: { contact_id: contactId },
          query: {},
          fetch: (p) => activityStore.timelinePage(rt.db, req.shopId, contactId, p),
          present: (rows) => rows.map((r) => r.activity),
        });
        res.json(timeline);
      },
    }),
  ]);
}
