import { Router, type Request, type RequestHandler, type Response } from 'express';
import { z } from 'zod';
import { isUuid } from '@shopstream/contracts';
import { jsonBody } from './app.js';
import type { ApiError } from './errors.js';
import { validate } from './validate.js';

/** The version prefix every route's path starts with; the services' routers are mounted under it. */
export const API_PREFIX = '/v2026-04';

export interface OpenApiParam {
  name: string;
  in: 'query' | 'path' | 'header';
  schema: z.ZodType;
  required?: boolean;
  description?: string;
}

/**
 * A response header. The string shorthand is a required string header with that description; `required`
 * false documents a header only some answers of that status carry.
 */
export type OpenApiHeader = string | { description: string; type?: 'string' | 'integer'; required?: boolean };
export type OpenApiHeaders = Record<string, OpenApiHeader>;

export type HttpMethod = 'get' | 'post' | 'patch' | 'delete';

/** What the OpenAPI document says of one operation: yielded by {@link defineRoute}, assembled by the runtime. */
export interface OpenApiOperation {
  method: HttpMethod;
  /** Stable name of the operation: generated clients name their methods after it. */
  operationId: string;
  /** OpenAPI path template, e.g. `/v2026-04/flows/{id}/`. */
  path: string;
  summary: string;
  description?: string;
  tags: string[];
  params?: OpenApiParam[];
  /** Expanded into one query parameter per key. */
  query?: z.ZodObject;
  body?: z.ZodType;
  /** A request body as a client would send it: shown in /docs and by client generators. */
  bodyExample?: unknown;
  /** Success responses; the error responses are added from `errors`. */
  responses: Record<number, { description: string; schema?: z.ZodType; headers?: OpenApiHeaders }>;
  /** HTTP statuses of the error body this operation can answer. */
  errors: number[];
  /** Headers some error statuses carry, e.g. Retry-After on 503. */
  errorHeaders?: Partial<Record<number, OpenApiHeaders>>;
}

export interface OpenApiPart {
  operations: OpenApiOperation[];
}

/** A path parameter: every one of this API is a uuid naming a row of the shop. */
export interface UuidPathParam {
  description: string;
  /**
   * Thrown at once when the value is not a uuid (flows: a 404, as for an unknown id). Absent: the handler
   * gets null and decides, after the query is checked.
   */
  orElse?: () => ApiError;
}

export const uuidPathParam = (description: string, orElse?: () => ApiError): UuidPathParam => ({ description, orElse });

export interface BodySpec<B extends z.ZodType> {
  /** The body as documented. */
  schema: B;
  /** express's `limit` of the JSON parser (`mb` is MiB); any other content type is a 415 before the body is read. */
  limit: string;
  example?: unknown;
  /**
   * Validate the body with `schema` before the handler, a 400 `validation_error` saying "`what` is not
   * valid". Absent: the handler validates `req.body` itself (the event endpoints check item by item).
   */
  what?: string;
}

type Out<S> = S extends z.ZodType ? z.output<S> : undefined;

export interface RouteInput<P extends string, Q, B> {
  /** Each declared path parameter, lowercased; null when it is not a uuid (and the parameter has no `orElse`). */
  params: Record<P, string | null>;
  query: Out<Q>;
  /** Validated when the body declares `what`; else `req.body` as parsed. */
  body: Out<B>;
}

export interface RouteSpec<P extends string, Q extends z.ZodObject | undefined, B extends z.ZodType | undefined> extends Omit<
  OpenApiOperation,
  'params' | 'query' | 'body' | 'bodyExample'
> {
  params?: Record<P, UuidPathParam>;
  /** Validated before the handler (after the path parameters), a 400 `validation_error` naming each bad parameter. */
  query?: Q;
  body?: B extends z.ZodType ? BodySpec<B> : undefined;
  /** Middleware run first, before the body is read (rate limits, timing). */
  before?: RequestHandler[];
  /** Answers the request (express 5 passes a rejection on to the error handler). */
  handler(req: Request, res: Response, input: RouteInput<P, Q, B>): unknown;
}

/** One operation, declared once: its express route and its OpenAPI entry. */
export interface Route {
  operation: OpenApiOperation;
  /** The path under {@link API_PREFIX} in express's syntax (`/flows/:id/`). */
  expressPath: string;
  handlers: RequestHandler[];
}

/**
 * Declares an operation once: the path template, the request schemas (the path parameters, the query, the
 * body), the responses and errors it documents, and the handler. The route checks what it declares before the
 * handler runs, in this order: path parameters, query, body; the body's content type and size before that.
 */
export function defineRoute<P extends string = never, Q extends z.ZodObject | undefined = undefined, B extends z.ZodType | undefined = undefined>(
  spec: RouteSpec<P, Q, B>,
): Route {
  if (!spec.path.startsWith(`${API_PREFIX}/`)) throw new Error(`defineRoute: ${spec.path} is not under ${API_PREFIX}`);
  const { params = {} as Record<P, UuidPathParam>, query, before = [], handler, ...doc } = spec;
  const body = spec.body as BodySpec<z.ZodType> | undefined;
  const names = Object.keys(params) as P[];
  const inPath = [...spec.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
  if (inPath.join() !== names.join()) throw new Error(`defineRoute: ${spec.path} declares the parameters ${names.join() || 'none'}`);
  const run: RequestHandler = async (req, res) => {
    const values = {} as Record<P, string | null>;
    for (const name of names) {
      const v = String(req.params[name]);
      // isUuid: the test every record's ids passed, so a value that fails it names no row.
      const ok = isUuid(v);
      if (!ok && params[name].orElse) throw params[name].orElse!();
      values[name] = ok ? v.toLowerCase() : null;
    }
    const input = {
      params: values,
      query: query ? validate(query, req.query, 'The query') : undefined,
      body: body?.what ? validate(body.schema, req.body, body.what) : req.body,
    } as RouteInput<P, Q, B>;
    await handler(req, res, input);
  };
  const { body: _b, ...rest } = doc as typeof doc & { body?: unknown };
  return {
    operation: {
      ...rest,
      ...(names.length > 0 ? { params: names.map((name) => ({ name, in: 'path' as const, schema: z.uuid(), description: params[name].description })) } : {}),
      ...(query ? { query } : {}),
      ...(body ? { body: body.schema, ...(body.example !== undefined ? { bodyExample: body.example } : {}) } : {}),
    },
    expressPath: spec.path.slice(API_PREFIX.length).replace(/\{(\w+)\}/g, ':$1'),
    handlers: [...before, ...(body ? jsonBody(body.limit) : []), run],
  };
}

/** The router of a service's routes (mounted under {@link API_PREFIX}) and their part of the OpenAPI document. */
export function mountRoutes(routes: Route[]): { router: Router; openapi: OpenApiPart } {
  const router = Router();
  for (const r of routes) router[r.operation.method](r.expressPath, ...r.handlers);
  return { router, openapi: { operations: routes.map((r) => r.operation) } };
}
