import { Router, type Request } from 'express';
import { bulkRequestDocSchema, bulkRequestSchema, bulkResponseSchema, eventAcceptedSchema, eventInputSchema, type BulkResultItem } from '@shopstream/contracts';
import { ApiError, jsonBody, sendJson, validate } from '@shopstream/http';
import type { OpenApiHeaders, OpenApiPart, Runtime } from '@shopstream/runtime';
import type { ContactResolver } from './contactResolver.js';
import { recordEvents, RETRY_AFTER_SECONDS, type IngestPorts } from './recordEvents.js';

/** Body limits: express counts `mb` as MiB. */
export const SINGLE_BODY_LIMIT = '1mb';
export const BULK_BODY_LIMIT = '10mb';

const ARRIVED = Symbol('arrived');
type Timed = Request & { [ARRIVED]?: Date };

/** `POST /events/` and `POST /events/bulk/`, mounted under /v2026-04 behind requireAuth. */
export function eventRoutes(rt: Runtime, contacts: ContactResolver): { router: Router; openapi: OpenApiPart } {
  const ports: IngestPorts = { contacts, bus: rt.bus, eventsTopic: rt.topics.events };
  const router = Router();
  // Taken before the body is read, so a large body's upload time does not move the default event_time.
  const arrived = (req: Timed, _res: unknown, next: () => void) => {
    req[ARRIVED] = new Date();
    next();
  };
  const context = (req: Timed, endpoint: 'single' | 'bulk') => ({ shopId: req.shopId, requestId: req.id, receivedAt: req[ARRIVED] ?? new Date(), endpoint });

  router.post('/events/bulk/', arrived, ...jsonBody(BULK_BODY_LIMIT), async (req, res) => {
    const body = validate(bulkRequestSchema, req.body, 'The request body');
    const outcomes = await recordEvents(ports, context(req, 'bulk'), body.events);
    const results: BulkResultItem[] = outcomes.map((o, index) =>
      o.status === 'success' ? { index, status: 'success', event: o.event } : { index, status: 'error', error: { code: o.error.code, message: o.error.message, request_id: req.id, fields: o.error.fields } },
    );
    sendJson(res, 200, { results });
  });

  router.post('/events/', arrived, ...jsonBody(SINGLE_BODY_LIMIT), async (req, res) => {
    const [outcome] = await recordEvents(ports, context(req, 'single'), [req.body]);
    if (outcome.status === 'error') throw new ApiError('validation_error', 'The event is not valid.', outcome.error.fields);
    sendJson(res, 202, outcome.event);
  });

  const unavailable: Partial<Record<number, OpenApiHeaders>> = {
    503: { 'Retry-After': { description: 'Seconds to wait before retrying the whole request.', type: 'integer' } },
  };
  const openapi: OpenApiPart = {
    operations: [
      {
        method: 'post',
        path: '/v2026-04/events/',
        operationId: 'createEvent',
        summary: 'Record an event',
        description:
          'Creates or replays an Activity and emits a metric event. Answered only after the event log durably holds the event. ' +
          'A replay (same remote_platform + remote_id, else same metric_name + deduping_key, in this shop) gets the same activity_id and records nothing new. ' +
          `Body at most 1 MiB. 503 with Retry-After (${RETRY_AFTER_SECONDS} s) when the log cannot take writes.`,
        tags: ['Events'],
        body: eventInputSchema,
        bodyExample: {
          name: 'Placed order #1001',
          metric: { metric_name: 'placed_order', value: 149.9, additional_properties: { cart: { total: 149.9, items: 3 } } },
          contact: { email: 'ada@example.com', phone: '+44 20 7946 0958' },
          event_time: '2026-04-01T10:00:00Z',
          remote_id: 'order-1001',
          remote_platform: 'shopify',
        },
        responses: { 202: { description: 'Accepted: the event is on the log.', schema: eventAcceptedSchema } },
        errors: [400, 401, 403, 413, 415, 503],
        errorHeaders: unavailable,
      },
      {
        method: 'post',
        path: '/v2026-04/events/bulk/',
        operationId: 'createEvents',
        summary: 'Record 1 to 100 events',
        description:
          'Each item is validated and recorded like a single event; an invalid item fails alone, with `fields` paths relative to the item. ' +
          'One result per item, in request order. Body at most 10 MiB. On 503 no item was recorded.',
        tags: ['Events'],
        body: bulkRequestDocSchema,
        bodyExample: {
          events: [
            { name: 'Viewed product', metric: { metric_name: 'viewed_product', additional_properties: { sku: 'SKU-1' } }, contact: { email: 'ada@example.com' } },
            { name: 'Placed order #1002', metric: { metric_name: 'placed_order', value: 42 }, remote_id: 'order-1002', remote_platform: 'shopify' },
          ],
        },
        responses: { 200: { description: 'One result per item, in request order.', schema: bulkResponseSchema } },
        errors: [400, 401, 403, 413, 415, 503],
        errorHeaders: unavailable,
      },
    ],
  };
  return { router, openapi };
}
