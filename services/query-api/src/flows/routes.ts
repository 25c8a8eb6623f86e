import { Router, type Request } from 'express';
import { z } from 'zod';
import {
  flowCreateSchema,
  flowListQuerySchema,
  flowPageSchema,
  flowSchema,
  flowTriggerPageSchema,
  flowUpdateSchema,
  pageQuerySchema,
} from '@shopstream/contracts';
import { ApiError, jsonBody, validate } from '@shopstream/http';
import type { OpenApiPart, Runtime } from '@shopstream/runtime';
import { keysetPager } from '../keysetPager.js';
import { uuidParam } from '../uuidParam.js';
import { flowStore, strip } from '@shopstream/flows';
import { triggerStore } from './triggerStore.js';

const idParam = { name: 'id', in: 'path' as const, schema: z.uuid(), description: 'The flow id.' };

const notFound = () => new ApiError('not_found', 'No such flow in this shop.');

/** A path id that is not a uuid cannot name a flow of this shop: the same 404 as an unknown one. */
function flowId(req: Request): string {
  const id = uuidParam(req, 'id');
  if (id === null) throw notFound();
  return id;
}

/** Flow management: `/flows/` and a flow's triggers. */
export function flowRoutes(rt: Runtime): { router: Router; openapi: OpenApiPart } {
  const router = Router();
  const page = keysetPager(rt);

  router.post('/flows/', ...jsonBody('256kb'), async (req, res) => {
    const body = validate(flowCreateSchema, req.body, 'The flow');
    const flow = await flowStore.create(rt.db, req.shopId, body);
    res.status(201).location(`${req.baseUrl}/flows/${flow.id}/`).json(flow);
  });

  router.get('/flows/', async (req, res) => {
    const q = validate(flowListQuerySchema, req.query, 'The query');
    const filters: Record<string, string> = q.status ? { status: q.status } : {};
    const flows = await page(req, q, { list: 'flows', filters, fetch: (p) => flowStore.page(rt.db, req.shopId, { ...p, status: q.status }) });
    res.json({ ...flows, results: flows.results.map(strip) });
  });

  router.get('/flows/:id/', async (req, res) => {
    const flow = await flowStore.get(rt.db, req.shopId, flowId(req));
    if (!flow) throw notFound();
    res.json(flow);
  });

  router.patch('/flows/:id/', ...jsonBody('256kb'), async (req, res) => {
    const id = flowId(req);
    const body = validate(flowUpdateSchema, req.body, 'The flow update');
    const flow = await flowStore.update(rt.db, req.shopId, id, body);
    if (!flow) throw notFound();
    res.json(flow);
  });

  router.delete('/flows/:id/', async (req, res) => {
    if (!(await flowStore.remove(rt.db, req.shopId, flowId(req)))) throw notFound();
    res.status(204).end();
  });

  router.get('/flows/:id/triggers/', async (req, res) => {
    const id = flowId(req);
    const q = validate(pageQuerySchema, req.query, 'The query');
    if (!(await flowStore.get(rt.db, req.shopId, id))) throw notFound();
    const triggers = await page(req, q, { list: 'triggers', filters: { flow_id: id }, query: {}, fetch: (p) => triggerStore.page(rt.db, req.shopId, id, p) });
    res.json({ ...triggers, results: triggers.results.map(strip) });
  });

  const tags = ['Flows'];
  const openapi: OpenApiPart = {
    operations: [
      { method: 'post', path: '/v2026-04/flows/', operationId: 'createFlow', summary: 'Create a flow', tags, body: flowCreateSchema, bodyExample: { name: 'Big orders', trigger: { metric_name: 'placed_order', property_conditions: [{ field: 'cart.total', op: 'gte', value: 100 }], contact_conditions: [{ field: 'email', op: 'ends_with', value: '@vip.example' }] } }, responses: { 201: { description: 'The flow.', schema: flowSchema, headers: { Location: 'The flow\'s URL.' } } }, errors: [400, 401, 403, 413, 415] },
      { method: 'get', path: '/v2026-04/flows/', operationId: 'listFlows', summary: 'List flows, newest first', tags, query: flowListQuerySchema, responses: { 200: { description: 'A page of flows.', schema: flowPageSchema } }, errors: [400, 401, 403] },
      { method: 'get', path: '/v2026-04/flows/{id}/', operationId: 'getFlow', summary: 'Get a flow', tags, params: [idParam], responses: { 200: { description: 'The flow.', schema: flowSchema } }, errors: [400, 401, 403, 404] },
      { method: 'patch', path: '/v2026-04/flows/{id}/', operationId: 'updateFlow', summary: 'Change a flow\'s name, status or trigger', description: 'A given trigger replaces the whole trigger. The matcher picks the change up within a few seconds.', tags, params: [idParam], body: flowUpdateSchema, bodyExample: { status: 'paused' }, responses: { 200: { description: 'The flow.', schema: flowSchema } }, errors: [400, 401, 403, 404, 413, 415] },
      { method: 'delete', path: '/v2026-04/flows/{id}/', operationId: 'deleteFlow', summary: 'Delete a flow', tags, params: [idParam], responses: { 204: { description: 'Deleted: it no longer triggers.' } }, errors: [400, 401, 403, 404] },
      { method: 'get', path: '/v2026-04/flows/{id}/triggers/', operationId: 'listFlowTriggers', summary: 'A flow\'s triggers, newest first', tags, params: [idParam], query: pageQuerySchema, responses: { 200: { description: 'A page of triggers.', schema: flowTriggerPageSchema } }, errors: [400, 401, 403, 404] },
    ],
  };
  return { router, openapi };
}
