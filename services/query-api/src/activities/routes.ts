import { Router } from 'express';
import { z } from 'zod';
import { activityListQuerySchema, activityPageSchema, activitySchema, pageQuerySchema } from '@shopstream/contracts';
import { ApiError, validate } from '@shopstream/http';
import type { OpenApiPart, Runtime } from '@shopstream/runtime';
import { keysetPager } from '../keysetPager.js';
import { uuidParam } from '../uuidParam.js';
import { activityStore } from './activityStore.js';

/** Reads of activities and contact timelines. */
export function activityRoutes(rt: Runtime): { router: Router; openapi: OpenApiPart } {
  const router = Router();
  const page = keysetPager(rt);

  router.get('/activities/:id/', async (req, res) => {
    const id = uuidParam(req, 'id');
    // Not yet projected, another shop's, or not an id at all: the same answer, so nothing leaks across shops.
    const activity = id === null ? null : await activityStore.get(rt.db, req.shopId, id);
    if (!activity) throw new ApiError('not_found', 'No such activity in this shop (yet: it appears shortly after the event is accepted).');
    res.json(activity);
  });

  router.get('/activities/', async (req, res) => {
    const q = validate(activityListQuerySchema, req.query, 'The query');
    const activities = await page(req, q, { list: 'activities', filters: { scope: q.scope }, fetch: (p) => activityStore.workspacePage(rt.db, req.shopId, p) });
    res.json({ ...activities, results: activities.results.map((r) => r.activity) });
  });

  router.get('/contacts/:contact_id/timeline/', async (req, res) => {
    const contactId = uuidParam(req, 'contact_id');
    const q = validate(pageQuerySchema, req.query, 'The query');
    if (contactId === null || !(await activityStore.contactKnown(rt.db, req.shopId, contactId))) {
      throw new ApiError('not_found', 'No such contact in this shop.');
    }
    const timeline = await page(req, q, {
      list: 'timeline',
      filters: { contact_id: contactId },
      query: {},
      fetch: (p) => activityStore.timelinePage(rt.db, req.shopId, contactId, p),
    });
    res.json({ ...timeline, results: timeline.results.map((r) => r.activity) });
  });

  const tags = ['Activities'];
  const openapi: OpenApiPart = {
    operations: [
      {
        method: 'get',
        path: '/v2026-04/activities/{id}/',
        operationId: 'getActivity',
        summary: 'Get an Activity',
        tags,
        params: [{ name: 'id', in: 'path', schema: z.uuid(), description: 'The activity id the event endpoints answered.' }],
        responses: { 200: { description: 'The Activity.', schema: activitySchema } },
        errors: [400, 401, 403, 404],
      },
      {
        method: 'get',
        path: '/v2026-04/activities/',
        operationId: 'listActivities',
        summary: 'The workspace\'s activities (those without a contact), newest first',
        tags,
        query: activityListQuerySchema,
        responses: { 200: { description: 'A page of activities.', schema: activityPageSchema } },
        errors: [400, 401, 403],
      },
      {
        method: 'get',
        path: '/v2026-04/contacts/{contact_id}/timeline/',
        operationId: 'listContactTimeline',
        summary: 'A contact\'s timeline, newest event_time first',
        tags,
        params: [{ name: 'contact_id', in: 'path', schema: z.uuid(), description: 'The contact id the event endpoints answered.' }],
        query: pageQuerySchema,
        responses: { 200: { description: 'A page of activities.', schema: activityPageSchema } },
        errors: [400, 401, 403, 404],
      },
    ],
  };
  return { router, openapi };
}
