import express, { type Request, type RequestHandler, type Response } from 'express';
import { bulkRequestDocSchema, bulkRequestSchema, bulkResponseSchema, eventAcceptedSchema, eventInputSchema, type BulkResultItem } from '@shopstream/contracts';
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  ApiError,
  bearerSecret,
  clientGone,
  defineRoute,
  HeldAnswers,
  LeasedRateLimiter,
  mountRoutes,
  onDroppedError,
  refusalAtOnce,
  requestIdOf,
  sendError,
  sendJson,
  validate,
  type OpenApiHeaders,
  type ShedAnswer,
} from '@shopstream/http';
import type { ContactKeys } from '@shopstream/privacy';
import type { IngestContext as Runtime } from './index.js';
import type { ContactResolver } from './contactResolver.js';
import { BodyWorkerCrashed, type BodyPool } from './bodyPool.js';
import { BYTES_READ, isLarge, largeBodyGate, refuseUnreadable } from './largeBodies.js';
import type { PreparedBody } from './prepareBody.js';
import { recordEvents, recordPrepared, RETRY_AFTER_SECONDS, type IngestPorts } from './recordEvents.js';

/** Body limits: express counts `mb` as MiB. */
export const SINGLE_BODY_LIMIT = '1mb';
export const BULK_BODY_LIMIT = '10mb';
/** The same limits in bytes, as body-parser reads them. */
const SINGLE_BODY_LIMIT_BYTES = 1024 * 1024;
const BULK_BODY_LIMIT_BYTES = 10 * 1024 * 1024;

const ARRIVED = Symbol('arrived');
type Timed = Request & { [ARRIVED]?: Date };

/** The per-key limit of the event endpoints (INGEST_RATE_LIMIT_*), shared by the replicas through Postgres. */
export function ingestRateLimiter(rt: Runtime): LeasedRateLimiter {
  return new LeasedRateLimiter({
    db: rt.db,
    bucket: 'events',
    unit: 'events',
    perSecond: rt.config.INGEST_RATE_LIMIT_PER_SECOND,
    perMinute: rt.config.INGEST_RATE_LIMIT_PER_MINUTE,
    chunk: rt.config.INGEST_RATE_LIMIT_CHUNK,
    leaseTimeoutMs: rt.config.INGEST_RATE_LIMIT_LEASE_TIMEOUT_MS,
    onFailOpen: (err) => rt.logger.warn({ err }, 'ingest rate limit: the database did not answer a lease; counting on this replica alone for now (fail open)'),
  });
}

/**
 * Charges `cost` events to the request's (key, shop): sets the RateLimit headers, answers 429 `rate_limited`
 * when over (then false: the request is done), and gives the tokens back if the request ends in a 5xx
 * (nothing was recorded). The 429 is sent here rather than thrown through express's error path: a producer
 * far over its limit sends thousands a second, and each should cost its neighbours as little as possible.
 */
async function charge(limiter: LeasedRateLimiter, req: Request, res: Response, cost: number): Promise<boolean> {
  if (!limiter.enabled) return true;
  const d = await limiter.take(req.apiKeyId, req.shopId, cost);
  if (!d.allowed) {
    sendError(res, req.id, limiter.error(d));
    return false;
  }
  LeasedRateLimiter.setHeaders(res, d);
  // A request that ends in a 5xx recorded nothing. One whose client left is dropped when it next asks `gone`
  // (goneOf), which gives its tokens back then: its connection closed before that, so the close cannot tell. One
  // whose client left while it was recorded, and which then failed (the log or the database away: the 5xx it would
  // have answered reaches no one), gives them back when the error handler drops it.
  (res as Abandoned)[REFUND] = d.refund;
  res.once('close', () => {
    if (res.writableFinished && res.statusCode >= 500) d.refund();
  });
  onDroppedError(res, (err) => {
    if (!(err instanceof ApiError) || err.status >= 500) d.refund();
  });
  return true;
}

const REFUND = Symbol('refund');
type Abandoned = Response & { [REFUND]?: () => void };

/**
 * IngestRequest's `gone` for this response: asked before anything is published, so a true answer means the request
 * is dropped having recorded nothing, and its tokens are given back (a decision's refund happens once).
 */
function goneOf(res: Response): () => boolean {
  return () => {
    if (!clientGone(res)) return false;
    (res as Abandoned)[REFUND]?.();
    return true;
  };
}

const SHED_ROUTES = new Set(['/v2026-04/events/', '/v2026-04/events/bulk/']);

/**
 * Sheds a producer far over its limit before express: a POST to the event endpoints with a cached key, a shop
 * that key reaches, and a (key, shop) bucket this replica already knows is dry is answered its 429 here, at a
 * fraction of what the same 429 cost through the router and middleware (see faults/README.md,
 * noisy-neighbour). Anything else (a key not in the cache, another shop, a bucket that may hold a token, a
 * query string) goes on to express, which answers it as before; so does every request when the limit is off.
 * The 429 is held for a while before it is sent (INGEST_RATE_LIMIT_HOLD_MS, see HeldAnswers): its Retry-After and
 * RateLimit headers are those of the moment it was decided, at most that hold earlier, so a client waits a little
 * longer than it had to, never less.
 */
export function shedOverLimit(rt: Runtime, limiter: LeasedRateLimiter): ((req: IncomingMessage, res: ServerResponse) => ShedAnswer | false) | undefined {
  if (!limiter.enabled) return undefined;
  const held = new HeldAnswers(rt.config.INGEST_RATE_LIMIT_HOLD_MS);
  return (req, res) => {
    if (req.method !== 'POST' || !SHED_ROUTES.has(req.url ?? '')) return false;
    const secret = bearerSecret(req.headers.authorization);
    const key = secret === undefined ? undefined : rt.apiKeys.cached(secret);
    const shop = req.headers['x-shop-id'];
    if (!key || typeof shop !== 'string') return false;
    // The key's shops are lower-case uuids: a shop found among them is a valid one.
    const shopId = shop.trim().toLowerCase();
    if (!key.shops.has(shopId)) return false;
    const d = limiter.rejectNow(key.id, shopId);
    if (!d) return false;
    const requestId = requestIdOf(req, rt.config.TRUST_REQUEST_ID);
    const error = limiter.error(d);
    held.hold(res, () => {
      res.setHeader('X-Request-Id', requestId);
      sendError(res, requestId, error);
    });
    return { route: req.url!, requestId, shopId, apiKeyId: key.id, status: 429 };
  };
}

/**
 * Refuses, before express, a POST to the event endpoints whose key needs no look-up to be refused (not of a key's
 * shape, cached as unknown, or an unknown key from an address out of failed look-ups: see refusalAtOnce): a flood
 * of made-up keys costs a fraction of what the same 401s and 429s cost through the router. The client's address
 * is the socket's unless a proxy is trusted (TRUST_PROXY): then express works it out, and only the first two are
 * answered here.
 */
export function shedUnknownKeys(rt: Runtime): (req: IncomingMessage, res: ServerResponse) => ShedAnswer | false {
  return (req, res) => {
    if (req.method !== 'POST' || !SHED_ROUTES.has(req.url ?? '')) return false;
    const secret = bearerSecret(req.headers.authorization);
    if (secret === undefined) return false;
    const error = refusalAtOnce(rt.apiKeys, secret, rt.config.TRUST_PROXY ? undefined : req.socket.remoteAddress);
    if (!error) return false;
    const requestId = requestIdOf(req, rt.config.TRUST_REQUEST_ID);
    res.setHeader('X-Request-Id', requestId);
    sendError(res, requestId, error);
    return { route: req.url!, requestId, shopId: '', apiKeyId: '', status: error.status };
  };
}

/**
 * Reads a large body (as largeBodyGate counts them) as bytes, for the body pool, rather than parsing it here:
 * express's JSON parser then finds the body read and passes. Anything it would refuse before reading (not JSON:
 * 415) or decode otherwise (a charset other than UTF-8) goes on to it untouched; the size limit and the content
 * encodings (gzip, …) are the same body-parser's, so a 413 or a corrupt gzip body is answered as before.
 */
function largeBodyBytes(thresholdBytes: number, limit: string): RequestHandler {
  const raw = express.raw({ limit, type: () => true });
  return (req, res, next) => {
    if (!isLarge(req, thresholdBytes) || req.is('application/json') === false) return next();
    const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(req.headers['content-type'] ?? '')?.[1];
    if (charset !== undefined && charset.toLowerCase() !== 'utf-8') return next();
    raw(req, res, next);
  };
}

/** The body's bytes in an ArrayBuffer of their own, which can be moved to a worker (a small Buffer may share the pool's). */
function ownBytes(b: Buffer): Uint8Array {
  return b.byteOffset === 0 && b.byteLength === b.buffer.byteLength ? b : new Uint8Array(b);
}

/** `POST /events/` and `POST /events/bulk/`, mounted under /v2026-04 behind requireAuth. */
export function eventRoutes(
  rt: Runtime,
  contacts: ContactResolver,
  keys: ContactKeys,
  limiter: LeasedRateLimiter = ingestRateLimiter(rt),
  bodies?: BodyPool,
  largeBus?: IngestPorts['bus'],
) {
  const ports: IngestPorts = { contacts, bus: rt.bus, eventsTopic: rt.topics.events, keys, sendPartBytes: rt.config.INGEST_SEND_PART_BYTES };
  // The records of a body prepared in the pool: published by the large-body producer thread when there is one.
  const preparedPorts: IngestPorts = largeBus ? { ...ports, bus: largeBus } : ports;
  // One gate for both endpoints: a single event of unknown length (chunked) takes a turn like a bulk body.
  const gate = largeBodyGate({
    thresholdBytes: rt.config.INGEST_LARGE_BODY_BYTES,
    max: rt.config.INGEST_MAX_LARGE_BODIES,
    waitMs: rt.config.INGEST_LARGE_BODY_WAIT_MS,
    bytesPerSecond: rt.config.INGEST_LARGE_BODY_BYTES_PER_SECOND,
  });
  // Taken before the body is read, so a large body's upload time does not move the default event_time.
  const arrived = (req: Timed, _res: unknown, next: () => void) => {
    req[ARRIVED] = new Date();
    next();
  };
  const context = (req: Timed, res: Response, endpoint: 'single' | 'bulk') => ({
    shopId: req.shopId,
    requestId: req.id,
    receivedAt: req[ARRIVED] ?? new Date(),
    endpoint,
    gone: goneOf(res),
  });
  // With a body pool, a large body is read as bytes and prepared in a worker; else parsed here like a small one.
  const bytesOf = (limit: string): RequestHandler[] => (bodies ? [largeBodyBytes(rt.config.INGEST_LARGE_BODY_BYTES, limit)] : []);
  /**
   * A large body prepared in the pool: the same answers as the in-thread path (400 invalid_json, the bulk body's
   * 400 validation_error); a worker that ended while holding it is a 503 with Retry-After.
   */
  const prepare = async (req: Timed, endpoint: 'single' | 'bulk'): Promise<Extract<PreparedBody, { kind: 'items' }>> => {
    let p: PreparedBody;
    try {
      // Counted before the bytes move to the worker (req.body is empty after): the large-body budget's charge.
      (req as Timed & { [BYTES_READ]?: number })[BYTES_READ] = (req.body as Buffer).length;
      p = await bodies!.run({
        bytes: ownBytes(req.body as Buffer),
        endpoint,
        shopId: req.shopId,
        requestId: req.id,
        receivedAt: (req[ARRIVED] ?? new Date()).toISOString(),
      });
    } catch (e) {
      if (!(e instanceof BodyWorkerCrashed)) throw e;
      throw new ApiError(
        'unavailable',
        `The request body could not be handled; no event of this request was recorded. Retry after ${RETRY_AFTER_SECONDS} seconds.`,
        {},
        { 'Retry-After': String(RETRY_AFTER_SECONDS) },
      );
    }
    if (p.kind === 'invalid_json') throw new ApiError('invalid_json', 'The body is not valid JSON.');
    if (p.kind === 'invalid') throw new ApiError('validation_error', p.message, p.fields);
    return p;
  };
  // Counted before the body is read: a producer over its limit costs no parsing.
  const chargeOne = async (req: Request, res: Response, next: () => void) => {
    if (await charge(limiter, req, res, 1)) next();
  };

  // Documented whatever the configuration, so the document does not change with it: on the 2xx answers the
  // headers are absent when the limit is off (INGEST_RATE_LIMIT_PER_SECOND and _PER_MINUTE both 0).
  const limitHeaders = {
    'RateLimit-Limit': {
      description: 'Events allowed per window for this API key and shop, of the policy closest to running out (burst: per second, steady: per minute).',
      type: 'integer',
    },
    'RateLimit-Remaining': { description: 'Events left in that policy (an estimate: other replicas draw from the same bucket).', type: 'integer' },
    'RateLimit-Reset': { description: 'Seconds until that policy is full again.', type: 'integer' },
    'RateLimit-Policy': 'IETF draft policies, e.g. "burst";q=350;w=1, "steady";q=3500;w=60.',
    RateLimit: 'IETF draft state of each policy, e.g. "burst";r=349;t=1, "steady";r=3499;t=1.',
  } satisfies OpenApiHeaders;
  const whenOn: OpenApiHeaders = Object.fromEntries(
    Object.entries(limitHeaders).map(([h, d]) => [
      h,
      typeof d === 'string'
        ? { description: `${d} Absent when the limit is off.`, required: false }
        : { ...d, description: `${d.description} Absent when the limit is off.`, required: false },
    ]),
  );
  const retry503: OpenApiHeaders = { 'Retry-After': { description: 'Seconds to wait before retrying the whole request.', type: 'integer' } };
  const limited429: OpenApiHeaders = {
    ...limitHeaders,
    'Retry-After': { description: 'Seconds until enough events are allowed again for this request.', type: 'integer' },
  };
  // A single event is counted before its body is read, so its 400, 413 and 415 carry the headers too; a bulk
  // request once its body holds 1 to 100 events. A 503 was counted (and its tokens given back).
  const singleErrorHeaders: Partial<Record<number, OpenApiHeaders>> = {
    400: whenOn,
    413: whenOn,
    415: whenOn,
    429: limited429,
    503: { ...whenOn, ...retry503 },
  };
  const bulkErrorHeaders: Partial<Record<number, OpenApiHeaders>> = { 429: limited429, 503: { ...whenOn, ...retry503 } };
  const limitText = limiter.enabled
    ? ` At most ${limiter.policies.map((p) => `${p.limit} events per ${p.windowSeconds === 1 ? 'second' : 'minute'}`).join(' and ')} per API key and shop across all replicas: over it, 429 rate_limited with Retry-After.`
    : ' No per-key limit is configured on this deployment (429 rate_limited when one is).';
  return mountRoutes([
    defineRoute({
      method: 'post',
      path: '/v2026-04/events/',
      operationId: 'createEvent',
      summary: 'Record an event',
      description:
        'Creates or replays an Activity and emits a metric event. Answered only after the event log durably holds the event. ' +
        'A replay (same remote_platform + remote_id, else same metric_name + deduping_key, in this shop) gets the same activity_id and records nothing new. ' +
        `Body at most 1 MiB. 503 with Retry-After (${RETRY_AFTER_SECONDS} s) when the log cannot take writes.` +
        limitText,
      tags: ['Events'],
      before: [arrived, chargeOne, refuseUnreadable(SINGLE_BODY_LIMIT_BYTES), gate, ...bytesOf(SINGLE_BODY_LIMIT)],
      // Validated by recordEvents, like each item of a bulk request.
      body: {
        schema: eventInputSchema,
        limit: SINGLE_BODY_LIMIT,
        example: {
          name: 'Placed order #1001',
          metric: { metric_name: 'placed_order', value: 149.9, additional_properties: { cart: { total: 149.9, items: 3 } } },
          contact: { email: 'ada@example.com', phone: '+44 20 7946 0958' },
          event_time: '2026-04-01T10:00:00Z',
          remote_id: 'order-1001',
          remote_platform: 'shopify',
        },
      },
      responses: { 202: { description: 'Accepted: the event is on the log.', schema: eventAcceptedSchema, headers: whenOn } },
      errors: [400, 401, 403, 413, 415, 429, 503],
      errorHeaders: singleErrorHeaders,
      async handler(req, res) {
        const [outcome] = Buffer.isBuffer(req.body)
          ? await prepare(req, 'single').then((p) => recordPrepared(preparedPorts, context(req, res, 'single'), p.items, p.heads))
          : await recordEvents(ports, context(req, res, 'single'), [req.body]);
        if (outcome.status === 'error') throw new ApiError('validation_error', 'The event is not valid.', outcome.error.fields);
        sendJson(res, 202, outcome.event);
      },
    }),
    defineRoute({
      method: 'post',
      path: '/v2026-04/events/bulk/',
      operationId: 'createEvents',
      summary: 'Record 1 to 100 events',
      description:
        'Each item is validated and recorded like a single event; an invalid item fails alone, with `fields` paths relative to the item. ' +
        'One result per item, in request order. Body at most 10 MiB; bodies over 1 MiB are handled a few at a time, and one that waits too long for its turn gets 503 with Retry-After. ' +
        (rt.config.INGEST_SEND_PART_BYTES > 0
          ? `On 503 no item was recorded, except for a request whose records weigh more than ${rt.config.INGEST_SEND_PART_BYTES} bytes: it is written in parts, and a 503 part way may leave some of its items recorded.`
          : 'On 503 no item was recorded.') +
        limitText +
        ' Each event of a bulk request counts; a request over the limit records none of them.',
      tags: ['Events'],
      before: [arrived, refuseUnreadable(BULK_BODY_LIMIT_BYTES), gate, ...bytesOf(BULK_BODY_LIMIT)],
      // Documented with its items typed; the handler checks the outer shape (1 to 100 items) and recordEvents each
      // item, so one bad item fails alone.
      body: {
        schema: bulkRequestDocSchema,
        limit: BULK_BODY_LIMIT,
        example: {
          events: [
            {
              name: 'Viewed product',
              metric: { metric_name: 'viewed_product', additional_properties: { sku: 'SKU-1' } },
              contact: { email: 'ada@example.com' },
            },
            { name: 'Placed order #1002', metric: { metric_name: 'placed_order', value: 42 }, remote_id: 'order-1002', remote_platform: 'shopify' },
          ],
        },
      },
      responses: { 200: { description: 'One result per item, in request order.', schema: bulkResponseSchema, headers: whenOn } },
      errors: [400, 401, 403, 413, 415, 429, 503],
      errorHeaders: bulkErrorHeaders,
      async handler(req, res) {
        let outcomes;
        if (Buffer.isBuffer(req.body)) {
          const p = await prepare(req, 'bulk');
          if (!(await charge(limiter, req, res, p.items.length))) return;
          outcomes = await recordPrepared(preparedPorts, context(req, res, 'bulk'), p.items, p.heads);
        } else {
          const body = validate(bulkRequestSchema, req.body, 'The request body');
          // Counted once the body is known to hold 1 to 100 events: each is one token.
          if (!(await charge(limiter, req, res, body.events.length))) return;
          outcomes = await recordEvents(ports, context(req, res, 'bulk'), body.events);
        }
        const results: BulkResultItem[] = outcomes.map((o, index) =>
          o.status === 'success'
            ? { index, status: 'success', event: o.event }
            : { index, status: 'error', error: { code: o.error.code, message: o.error.message, request_id: req.id, fields: o.error.fields } },
        );
        sendJson(res, 200, { results });
      },
    }),
  ]);
}
