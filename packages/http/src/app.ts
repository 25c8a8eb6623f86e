import express, { type ErrorRequestHandler, type Express, type RequestHandler } from 'express';
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ErrorBody } from '@shopstream/contracts';
import { isDatabaseUnavailable } from '@shopstream/db';
import { counter, deadConsumers, histogram, metricsText, registry, tracingEnabled, type Logger } from '@shopstream/telemetry';
import { serverSpan } from './serverSpan.js';
import { ApiError, ClientGone, clientGone, droppedError } from './errors.js';
import { countIngestAnswer } from './answerRates.js';

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      id: string;
      log: Logger;
      /** Set by requireAuth: the shop of this request and the key that reached it. */
      shopId: string;
      apiKeyId: string;
    }
  }
}

const requests = counter(
  'shopstream_http_requests_total',
  'HTTP requests, by service, route and status (499: the client closed its connection before the answer, which was not sent).',
  ['service', 'method', 'route', 'status'],
);
const latency = histogram('shopstream_http_request_seconds', 'HTTP request latency, by service, route and status.', ['service', 'method', 'route', 'status']);

const shed = counter(
  'shopstream_http_shed_total',
  'Requests answered before the router by a shed handler (a producer over its rate limit), by service, route and status; also counted in shopstream_http_requests_total.',
  ['service', 'route', 'status'],
);

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The status a request is counted and logged with when its client closed the connection before the answer (nginx's). */
export const CLIENT_CLOSED = 499;

// A pino child per request (and a second one once the shop is known) cost more CPU than the rest of the
// request's logging together: the request line passes its bindings as fields instead, and req.log is made
// only when something asks for it (the same bindings, so such lines read as before).
const BASE_LOGGER = Symbol('baseLogger');
const OWN_LOGGER = Symbol('ownLogger');
type LoggedRequest = express.Request & { [BASE_LOGGER]: Logger; [OWN_LOGGER]?: { log: Logger; shopId: string | undefined } };
const bindingsOf = (req: express.Request) =>
  req.shopId === undefined ? { request_id: req.id } : { request_id: req.id, shop_id: req.shopId, api_key_id: req.apiKeyId };
Object.defineProperty(express.request, 'log', {
  configurable: true,
  get(this: LoggedRequest): Logger {
    const own = this[OWN_LOGGER];
    if (own && own.shopId === this.shopId) return own.log;
    const log = this[BASE_LOGGER].child(bindingsOf(this));
    this[OWN_LOGGER] = { log, shopId: this.shopId };
    return log;
  },
  set(this: LoggedRequest, log: Logger) {
    this[OWN_LOGGER] = { log, shopId: this.shopId };
  },
});

/** The request's id: the client's X-Request-Id when trusted (TRUST_REQUEST_ID) and well-formed, else a new uuid. */
export function requestIdOf(req: IncomingMessage, trustRequestId: boolean): string {
  const given = trustRequestId ? req.headers['x-request-id'] : undefined;
  return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
}

/** What a service's shed handler answered a request with, outside express (see ShedHandler in server.ts). */
export interface ShedAnswer {
  /** The route template, as in requestContext's metrics and logs. */
  route: string;
  requestId: string;
  shopId: string;
  apiKeyId: string;
  /** The answer's status: it may be sent later than it is decided (see HeldAnswers). */
  status: number;
}

/**
 * A service's shed handlers as one ShedHandler for listen(): the first that answers wins, and its request is
 * counted and logged as requestContext counts and logs one answered inside express (same series, same line).
 */
export function shedHandler(service: string, logger: Logger, sheds: ((req: IncomingMessage, res: ServerResponse) => ShedAnswer | false)[]) {
  if (sheds.length === 0) return undefined;
  return (req: IncomingMessage, res: ServerResponse): boolean => {
    const start = process.hrtime.bigint();
    for (const answer of sheds) {
      const a = answer(req, res);
      if (!a) continue;
      const seconds = Number(process.hrtime.bigint() - start) / 1e9;
      // The time is the server's work on the request, without the hold of a held answer.
      const labels = { service, method: req.method ?? '', route: a.route, status: String(a.status) };
      requests.inc(labels);
      latency.observe(labels, seconds);
      countIngestAnswer(a.route, a.status);
      shed.inc({ service, route: a.route, status: labels.status });
      logger.info(
        {
          request_id: a.requestId,
          shop_id: a.shopId,
          api_key_id: a.apiKeyId,
          method: req.method,
          path: a.route,
          status: a.status,
          ms: Math.round(seconds * 1e4) / 10,
        },
        'request',
      );
      return true;
    }
    return false;
  };
}

/** Request id, per-request logger, request metrics. The first middleware of every Shopstream app. */
export function requestContext(service: string, logger: Logger, routes: string[] = [], trustRequestId = false): RequestHandler {
  const routeOf = routeMatcher(routes);
  return (req, res, next) => {
    // A client's X-Request-Id only when a proxy in front sets it (TRUST_REQUEST_ID): otherwise anyone could
    // choose the ids in our logs, or send a secret there and have it logged.
    req.id = requestIdOf(req, trustRequestId);
    res.setHeader('X-Request-Id', req.id);
    (req as LoggedRequest)[BASE_LOGGER] = logger;
    const start = process.hrtime.bigint();
    // Taken now: a router mounted at /v2026-04 strips its mount path from req.url while it runs, and a
    // response sent from inside it finishes before it puts the path back.
    const path = req.path;
    // Tracing on: the request's server span, active while its handlers run (their database and Kafka spans
    // are its children, and the records ingest writes carry its trace in `traceparent`).
    const span = tracingEnabled() ? serverSpan(req, path) : undefined;
    // The answer sent, or the connection closed before it was (the client gave up or went away: no 'finish' ever
    // comes then), counted and logged as 499, nginx's "client closed request".
    const done = (status: number) => {
      // The route template, not the path: ids in paths would make a metric series per id.
      const route = routeOf(path);
      span?.finish(route, status);
      const seconds = Number(process.hrtime.bigint() - start) / 1e9;
      const labels = { service, method: req.method, route, status: String(status) };
      requests.inc(labels);
      latency.observe(labels, seconds);
      countIngestAnswer(route, status);
      const level = status >= 500 ? 'error' : 'info';
      const own = (req as LoggedRequest)[OWN_LOGGER];
      const ms = Math.round(seconds * 1e4) / 10;
      // A logger already made for the request carries the bindings; otherwise the line's fields do.
      // `path` is the template too: logs and metrics group the same, and no id from a path lands in a log line.
      if (own && own.shopId === req.shopId) own.log[level]({ method: req.method, path: route, status, ms }, 'request');
      else if (req.shopId === undefined) logger[level]({ request_id: req.id, method: req.method, path: route, status, ms }, 'request');
      else logger[level]({ request_id: req.id, shop_id: req.shopId, api_key_id: req.apiKeyId, method: req.method, path: route, status, ms }, 'request');
    };
    // 'close' comes after 'finish' too (one listener, not two).
    res.once('close', () => done(res.writableFinished ? res.statusCode : CLIENT_CLOSED));
    if (span) span.run(next);
    else next();
  };
}

/**
 * What `res.status(status).json(body)` sends when the app sets no json replacer, spaces or escape and no
 * ETag (createBaseApp): the same bytes and headers, without express's per-call settings look-ups and
 * Content-Type re-parsing, for the hot endpoints.
 */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(text, 'utf8'));
  res.end(text, 'utf8');
}

export function sendError(res: ServerResponse, requestId: string, err: ApiError): void {
  for (const [k, v] of Object.entries(err.headers)) res.setHeader(k, v);
  const body: ErrorBody = { error: { code: err.code, message: err.message, request_id: requestId, fields: err.fields } };
  sendJson(res, err.status, body);
}

/** Turns anything thrown into the one error body; a 500 never carries a stack trace. */
export const errorHandler: ErrorRequestHandler = (err, req, res, _next) => {
  // Its client is gone (the handler stopped on purpose, or failed for that reason): nothing to answer, and
  // requestContext has counted and logged it as 499.
  if (err instanceof ClientGone || (clientGone(res) && (err instanceof ApiError || isDatabaseUnavailable(err)))) return droppedError(res, err);
  const requestId = req.id ?? randomUUID();
  if (err instanceof ApiError) return sendError(res, requestId, err);
  // body-parser's errors carry a `type` and a status.
  const type = (err as { type?: string }).type;
  if (type === 'entity.parse.failed') return sendError(res, requestId, new ApiError('invalid_json', 'The body is not valid JSON.'));
  if (type === 'entity.too.large')
    return sendError(res, requestId, new ApiError('payload_too_large', `The body is larger than ${(err as { limit?: number }).limit ?? 'the limit'} bytes.`));
  if (type === 'encoding.unsupported' || type === 'charset.unsupported')
    return sendError(res, requestId, new ApiError('unsupported_media_type', 'Send the body as UTF-8 JSON.'));
  // Any other body-parser error the client caused (a corrupt gzip body, a wrong Content-Length, an aborted
  // upload): a 400, not a 500 logged as our failure.
  const e = err as { expose?: boolean; status?: number; message?: string };
  if (e.expose === true && typeof e.status === 'number' && e.status >= 400 && e.status < 500)
    return sendError(res, requestId, new ApiError('invalid_json', `The body could not be read: ${e.message ?? type}.`));
  // The router could not decode a path parameter (`/flows/%ZZ/`): a URIError with status 400 and no `expose`.
  if (err instanceof URIError)
    return sendError(res, requestId, new ApiError('bad_request', 'The URL holds a malformed percent-encoding (%XX with two hex digits).'));
  // The database is away (stopped, restarting, unreachable): the client may retry; not our bug, so no 500.
  if (isDatabaseUnavailable(err)) {
    (req.log ?? console).warn({ err: { message: (err as Error).message, code: (err as { code?: string }).code } }, 'database unavailable');
    return sendError(
      res,
      requestId,
      new ApiError('unavailable', 'The database is unavailable; retry after the delay in Retry-After.', {}, { 'Retry-After': '2' }),
    );
  }
  (req.log ?? console).error({ err }, 'unhandled error');
  // Its client gone, the 500 reaches no one: the request is dropped as the ones above are.
  if (clientGone(res)) droppedError(res, err);
  return sendError(res, requestId, new ApiError('internal_error', 'Something went wrong on our side. Quote the request id when you report it.'));
};

/**
 * Parses a JSON body up to `limit`; any other content type is a 415 (checked before the body is read).
 */
export function jsonBody(limit: string | number): RequestHandler[] {
  return [
    (req, _res, next) => {
      // null: no body at all (a 400 from validation, as with Content-Length: 0); false: another type.
      if (req.is('application/json') === false) {
        return next(
          new ApiError('unsupported_media_type', 'Send the body with Content-Type: application/json.', { 'content-type': 'Must be application/json.' }),
        );
      }
      next();
    },
    // The check above already required a body of type application/json: body-parser need not test it again.
    express.json({ limit, strict: false, type: () => true }),
  ];
}

export interface AppParts {
  service: string;
  logger: Logger;
  /** Answers /readyz: each check resolves true when its dependency answers. */
  readiness: Record<string, () => Promise<boolean>>;
  /** The API's path templates (`/v2026-04/flows/{id}/`): the `route` of metrics and logs, whatever the status. */
  routes?: string[];
  /**
   * express's `trust proxy` (TRUST_PROXY): `true`, a hop count, or addresses and subnets
   * (`loopback, 10.0.0.0/8`). Unset: X-Forwarded-For and -Proto are ignored (any client could set them).
   */
  trustProxy?: string;
  /** Adopt a client's X-Request-Id (TRUST_REQUEST_ID), for a proxy in front that sets it. */
  trustRequestId?: boolean;
}

/** TRUST_PROXY as express takes it: booleans and hop counts as such, anything else as addresses. */
export function trustProxySetting(value: string | undefined): boolean | number | string {
  if (value === undefined || value.trim() === '' || value.trim() === 'false') return false;
  if (value.trim() === 'true') return true;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  return value;
}

/** The process's own endpoints, besides the API's. */
const OWN_ROUTES = ['/healthz', '/readyz', '/metrics', '/status', '/status.json', '/openapi.json', '/asyncapi.json', '/docs/', '/docs/{asset}'];

/**
 * Maps a request path to its route template. Taken from the templates, not from express's matched route: a
 * request refused before its route ran (401, 403, 415 in a middleware, 404 of a known path) has no matched
 * route, and a route matched in a mounted router has its mount path only in some states, so one endpoint was
 * counted under three labels. Unknown paths are `unmatched` (a label per path would let anyone add series).
 */
export function routeMatcher(templates: string[]): (path: string) => string {
  const compiled = [...new Set([...templates, ...OWN_ROUTES])].map((t) => ({
    template: t,
    re: new RegExp(`^${t.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\\{[^}]+\\\}|\{[^}]+\}/g, '[^/]+')}$`),
  }));
  const exact = new Map(compiled.filter((c) => !c.template.includes('{')).map((c) => [c.template, c.template]));
  return (path) => {
    const hit = exact.get(path) ?? (path === '/docs' ? '/docs/' : undefined);
    if (hit) return hit;
    for (const c of compiled) if (c.re.test(path)) return c.template;
    return 'unmatched';
  };
}

const READINESS_TIMEOUT_MS = 2_000;

/** An express app with the common middleware and the health, readiness and metrics endpoints. */
export function createBaseApp(parts: AppParts): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('trust proxy', trustProxySetting(parts.trustProxy));
  app.use(requestContext(parts.service, parts.logger, parts.routes, parts.trustRequestId));
  app.get('/healthz', async (_req, res) => {
    // Liveness: a consumer its supervisor could not bring back for CONSUMER_DEAD_AFTER_MS needs a new process.
    const dead = await deadConsumers();
    if (dead.length > 0) res.status(503).json({ status: 'dead_consumers', service: parts.service, consumers: dead });
    else res.json({ status: 'ok', service: parts.service });
  });
  app.get('/readyz', async (_req, res) => {
    // Each check gets 2 s: a database or broker that does not answer is "not ready", not a hung probe.
    const within = (p: Promise<boolean>) =>
      new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), READINESS_TIMEOUT_MS);
        p.then(
          (v) => (clearTimeout(timer), resolve(v)),
          () => (clearTimeout(timer), resolve(false)),
        );
      });
    const results = await Promise.all(Object.entries(parts.readiness).map(async ([name, check]) => [name, await within(check())] as const));
    const ok = results.every(([, up]) => up);
    res.status(ok ? 200 : 503).json({ status: ok ? 'ready' : 'not_ready', checks: Object.fromEntries(results) });
  });
  app.get('/metrics', async (_req, res) => {
    res.setHeader('Content-Type', registry.contentType);
    res.send(await metricsText());
  });
  return app;
}

/**
 * Must be added after every route: unknown paths get the error body, not express's HTML. A known path asked
 * with a method it does not have (`HEAD /v2026-04/events/`) is a 405 with `Allow`, from `operations` (the
 * API's methods by path template); express answers HEAD for every GET route itself.
 */
export function finishApp(app: Express, operations: { method: string; path: string }[] = []): void {
  const routeOf = routeMatcher(operations.map((op) => op.path));
  const allowed = new Map<string, Set<string>>();
  for (const op of operations) {
    const methods = allowed.get(op.path) ?? new Set<string>();
    methods.add(op.method.toUpperCase());
    if (op.method.toUpperCase() === 'GET') methods.add('HEAD');
    allowed.set(op.path, methods);
  }
  app.use((req, _res, next) => {
    const methods = allowed.get(routeOf(req.path));
    if (methods && !methods.has(req.method)) {
      const allow = [...methods].sort().join(', ');
      return next(new ApiError('method_not_allowed', `${req.method} is not allowed on ${req.path}; use ${allow}.`, {}, { Allow: allow }));
    }
    next(new ApiError('not_found', `No route for ${req.method} ${req.path}.`));
  });
  app.use(errorHandler);
}
