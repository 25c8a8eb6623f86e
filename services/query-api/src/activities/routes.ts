import { Router } from 'express';
import { z } from 'zod';
import { activityListQuerySchema, activityPageSchema, activitySchema, pageQuerySchema } from '@shopstream/contracts';
import { ApiError, cursorSecretOr, keysetCursorCodec, keysetPage, validate } from '@shopstream/http';
import type { OpenApiPart, Runtime } from '@shopstream/runtime';
import { activityStore, type Position } from './activityStore.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Reads of activities and contact timelines. */
export function activityRoutes(rt: Runtime): { router: Router; openapi: OpenApiPart } {
  const router = Router();
  const codec = keysetCursorCodec(cursorSecretOr(rt.env.CURSOR_SECRET), z.tuple([z.string(), z.string()]) as z.ZodType<Position>);

  router.get('/activities/:id/', async (req, res) => {
    const id = String(req.params.id);
    // Not yet projected, another shop's, or not an id at all: the same answer, so nothing leaks across shops.
    const activity = UUID.test(id) ? await activityStore.get(rt.db, req.shopId, id.toLowerCase()) : null;
    if (!activity) throw new ApiError('not_found', 'No such activity in this shop (yet: it appears shortly after the event is accepted).');
    res.json(activity);
  });

  router.get('/activities/', async (req, res) => {
    const q = validate(activityListQuerySchema, req.query, 'The query');
    const page = await keysetPage({
      req,
      publicBaseUrl: rt.env.PUBLIC_BASE_URL,
      codec,
      cursor: q.cursor,
      limit: q.limit ?? 100,
      filters: { scope: q.scope },
      fetch: (p) => activityStore.workspacePage(rt.db, req.shopId, p),
    });
    res.json({ ...page, results: page.results.map((r) => r.activity) });
  });

  router.get('/contacts/:contact_id/timeline/', async (req, res) => {
    const contactId = String(req.params.contact_id);
    const q = validate(pageQuerySchema, req.query, 'The query');
    if (!UUID.test(contactId) || !(await activityStore.contactKnown(rt.db, req.shopId, contactId.toLowerCase()))) {
      throw new ApiError('not_found', 'No such contact in this shop.');
    }
    const page = await keysetPage({
      req,
      publicBaseUrl: rt.env.PUBLIC_BASE_URL,
      codec,
      cursor: q.cursor,
      limit: q.limit ?? 100,
      filters: { contact_id: contactId.toLowerCase() },
      query: {},
      fetch: (p) => activityStore.timelinePage(rt.db, req.shopId, contactId.toLowerCase(), p),
    });
    res.json({ ...page, results: page.results.map((r) => r.activity) });
  });

  const tags = ['Activities'];
  const openapi: OpenApiPart = {
    operations: [
      {
        method: 'get',
        path: '/v2026-04/activities/{id}/',
        summary: 'Get an Activity',
        tags,
        params: [{ name: 'id', in: 'path', schema: z.uuid(), description: 'The activity id the event endpoints answered.' }],
        responses: { 200: { description: 'The Activity.', schema: activitySchema } },
        errors: [400, 401, 403, 404],
      },
      {
        method: 'get',
        path: '/v2026-04/activities/',
        summary: 'The workspace\'s activities (those without a contact), newest first',
        tags,
        query: activityListQuerySchema,
        responses: { 200: { description: 'A page of activities.', schema: activityPageSchema } },
        errors: [400, 401, 403],
      },
      {
        method: 'get',
        path: '/v2026-04/contacts/{contact_id}/timeline/',
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
