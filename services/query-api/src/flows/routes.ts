import {
  flowCreateSchema,
  flowListQuerySchema,
  flowPageSchema,
  flowSchema,
  flowTriggerPageSchema,
  flowUpdateSchema,
  pageQuerySchema,
} from '@shopstream/contracts';
import { ApiError, defineRoute, mountRoutes, uuidPathParam } from '@shopstream/http';
import type { QueryContext } from '../index.js';
import { keysetPager } from '../keysetPager.js';
import { flowStore } from '@shopstream/flows';
import { triggerStore } from './triggerStore.js';

const notFound = () => new ApiError('not_found', 'No such flow in this shop.');

/** A path id that is not a uuid cannot name a flow of this shop: the same 404 as an unknown one. */
const params = { id: uuidPathParam('The flow id.', notFound) };
const BODY_LIMIT = '256kb';

/** Flow management: `/flows/` and a flow's triggers. */
export function flowRoutes(rt: QueryContext) {
  const page = keysetPager(rt);
  const tags = ['Flows'];
  return mountRoutes([
    defineRoute({
      method: 'post',
      path: '/v2026-04/flows/',
      operationId: 'createFlow',
      summary: 'Create a flow',
      tags,
      body: {
        schema: flowCreateSchema,
        what: 'The flow',
        limit: BODY_LIMIT,
        example: {
          name: 'Big orders',
          trigger: {
            metric_name: 'placed_order',
            property_conditions: [{ field: 'cart.total', op: 'gte', value: 100 }],
            contact_conditions: [{ field: 'email', op: 'ends_with', value: '@vip.example' }],
          },
        },
      },
      responses: { 201: { description: 'The flow.', schema: flowSchema, headers: { Location: "The flow's URL." } } },
      errors: [400, 401, 403, 413, 415],
      async handler(req, res, { body }) {
        const flow = await flowStore.create(rt.db, req.shopId, body);
        res.status(201).location(`${req.baseUrl}/flows/${flow.id}/`).json(flow);
      },
    }),
    defineRoute({
      method: 'get',
      path: '/v2026-04/flows/',
      operationId: 'listFlows',
      summary: 'List flows, newest first',
      tags,
      query: flowListQuerySchema,
      responses: { 200: { description: 'A page of flows.', schema: flowPageSchema } },
      errors: [400, 401, 403],
      async handler(req, res, { query: q }) {
        const filters: Record<string, string> = q.status ? { status: q.status } : {};
        res.json(await page(req, q, { list: 'flows', filters, fetch: (p) => flowStore.page(rt.db, req.shopId, { ...p, status: q.status }) }));
      },
    }),
    defineRoute({
      method: 'get',
      path: '/v2026-04/flows/{id}/',
      operationId: 'getFlow',
      summary: 'Get a flow',
      tags,
      params,
      responses: { 200: { description: 'The flow.', schema: flowSchema } },
      errors: [400, 401, 403, 404],
      async handler(req, res, { params: { id } }) {
        const flow = await flowStore.get(rt.db, req.shopId, id!);
        if (!flow) throw notFound();
        res.json(flow);
      },
    }),
    defineRoute({
      method: 'patch',
      path: '/v2026-04/flows/{id}/',
      operationId: 'updateFlow',
      summary: "Change a flow's name, status or trigger",
      description: 'A given trigger replaces the whole trigger. The matcher picks the change up within a few seconds.',
      tags,
      params,
      body: { schema: flowUpdateSchema, what: 'The flow update', limit: BODY_LIMIT, example: { status: 'paused' } },
      responses: { 200: { description: 'The flow.', schema: flowSchema } },
      errors: [400, 401, 403, 404, 413, 415],
      async handler(req, res, { params: { id }, body }) {
        const flow = await flowStore.update(rt.db, req.shopId, id!, body);
        if (!flow) throw notFound();
        res.json(flow);
      },
    }),
    defineRoute({
      method: 'delete',
      path: '/v2026-04/flows/{id}/',
      operationId: 'deleteFlow',
      summary: 'Delete a flow',
      tags,
      params,
      responses: { 204: { description: 'Deleted: it no longer triggers.' } },
      errors: [400, 401, 403, 404],
      async handler(req, res, { params: { id } }) {
        if (!(await flowStore.remove(rt.db, req.shopId, id!))) throw notFound();
        res.status(204).end();
      },
    }),
    defineRoute({
      method: 'get',
      path: '/v2026-04/flows/{id}/triggers/',
      operationId: 'listFlowTriggers',
      summary: "A flow's triggers, newest first",
      tags,
      params,
      query: pageQuerySchema,
      responses: { 200: { description: 'A page of triggers.', schema: flowTriggerPageSchema } },
      errors: [400, 401, 403, 404],
      async handler(req, res, { params: { id }, query: q }) {
        if (!(await flowStore.get(rt.db, req.shopId, id!))) throw notFound();
        res.json(await page(req, q, { list: 'triggers', filters: { flow_id: id! }, query: {}, fetch: (p) => triggerStore.page(rt.db, req.shopId, id!, p) }));
      },
    }),
  ]);
}
