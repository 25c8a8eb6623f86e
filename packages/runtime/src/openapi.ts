import express, { type RequestHandler } from 'express';
import { createRequire } from 'node:module';
import { z } from 'zod';
import { errorBodySchema } from '@shopstream/contracts';

export interface OpenApiParam {
  name: string;
  in: 'query' | 'path' | 'header';
  schema: z.ZodType;
  required?: boolean;
  description?: string;
}

export interface OpenApiOperation {
  method: 'get' | 'post' | 'patch' | 'delete';
  /** OpenAPI path template, e.g. `/v2026-04/flows/{id}/`. */
  path: string;
  summary: string;
  description?: string;
  tags: string[];
  params?: OpenApiParam[];
  /** Expanded into one query parameter per key. */
  query?: z.ZodObject;
  body?: z.ZodType;
  /** Success responses; the error responses are added from `errors`. */
  responses: Record<number, { description: string; schema?: z.ZodType; headers?: Record<string, string> }>;
  /** HTTP statuses of the error body this operation can answer. */
  errors: number[];
}

export interface OpenApiPart {
  operations: OpenApiOperation[];
}

const jsonSchema = (s: z.ZodType, io: 'input' | 'output') =>
  z.toJSONSchema(s, { target: 'draft-2020-12', io, unrepresentable: 'any', reused: 'inline' }) as Record<string, unknown>;

const strip = ({ $schema: _s, ...rest }: Record<string, unknown>) => rest;

const errorDescriptions: Record<number, string> = {
  400: 'validation_error, invalid_json, invalid_cursor or invalid_shop',
  401: 'unauthorized: missing, unknown or revoked API key',
  403: 'forbidden: the key is not granted this shop',
  404: 'not_found',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  429: 'rate_limited',
  503: 'unavailable: retry after Retry-After seconds',
};

/** An OpenAPI 3.1 document generated from the zod contracts the routes validate with. */
export function buildOpenApi(title: string, parts: OpenApiPart[], serverUrl?: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of parts.flatMap((p) => p.operations)) {
    const parameters = [
      { name: 'X-Shop-Id', in: 'header', required: true, schema: { type: 'string', format: 'uuid' }, description: 'The shop addressed.' },
      ...(op.params ?? []).map((p) => ({ name: p.name, in: p.in, required: p.in === 'path' ? true : (p.required ?? false), description: p.description, schema: strip(jsonSchema(p.schema, 'input')) })),
      ...Object.entries(op.query?.shape ?? {}).map(([name, s]) => ({
        name,
        in: 'query',
        required: !(s as z.ZodType).safeParse(undefined).success,
        schema: strip(jsonSchema(s as z.ZodType, 'input')),
        description: (s as z.ZodType).description,
      })),
    ];
    const responses: Record<string, unknown> = {};
    for (const [status, r] of Object.entries(op.responses)) {
      responses[status] = {
        description: r.description,
        ...(r.headers ? { headers: Object.fromEntries(Object.entries(r.headers).map(([h, d]) => [h, { description: d, schema: { type: 'string' } }])) } : {}),
        ...(r.schema ? { content: { 'application/json': { schema: strip(jsonSchema(r.schema, 'output')) } } } : {}),
      };
    }
    for (const status of op.errors) {
      responses[String(status)] = { description: errorDescriptions[status] ?? 'error', content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorBody' } } } };
    }
    paths[op.path] ??= {};
    paths[op.path][op.method] = {
      summary: op.summary,
      description: op.description,
      tags: op.tags,
      parameters,
      ...(op.body ? { requestBody: { required: true, content: { 'application/json': { schema: strip(jsonSchema(op.body, 'input')) } } } } : {}),
      responses,
    };
  }
  return {
    openapi: '3.1.0',
    info: { title: `Shopstream ${title}`, version: '2026-04', description: 'Event recording and conversation export, one shop per request.' },
    ...(serverUrl ? { servers: [{ url: serverUrl }] } : {}),
    security: [{ bearer: [] }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'API key created with `pnpm cli api-keys create`.' } },
      schemas: { ErrorBody: strip(jsonSchema(errorBodySchema, 'output')) },
    },
  };
}

/** /docs: Swagger UI from the swagger-ui-dist package, served from this process (works offline). */
export function docsHandler(): RequestHandler {
  const require = createRequire(import.meta.url);
  const assets = (require('swagger-ui-dist') as { getAbsoluteFSPath(): string }).getAbsoluteFSPath();
  const statics = express.static(assets, { index: false });
  const page = `<!doctype html><html><head><meta charset="utf-8"><title>Shopstream API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css"></head><body><div id="ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({ url: '/openapi.json', dom_id: '#ui' });</script></body></html>`;
  return (req, res, next) => {
    if (req.path === '/' || req.path === '') {
      res.type('html').send(page);
      return;
    }
    statics(req, res, next);
  };
}
