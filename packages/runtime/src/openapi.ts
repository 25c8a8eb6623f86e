import express, { type RequestHandler } from 'express';
import { createRequire } from 'node:module';
import { z } from 'zod';
import { errorBodySchema } from '@shopstream/contracts';
import type { OpenApiHeaders, OpenApiPart } from '@shopstream/http';

type Json = Record<string, unknown>;
type Io = 'input' | 'output';

const jsonSchema = (s: z.ZodType, io: Io) =>
  forCodeGenerators(z.toJSONSchema(s, { target: 'draft-2020-12', io, unrepresentable: 'any', reused: 'inline', override: noRegexFlags })) as Json;

/** Formats whose meaning a generator knows: the pattern zod writes beside them says nothing more to a client. */
const FORMATS_WITHOUT_PATTERN = new Set(['uuid', 'date-time', 'email', 'uri']);

/**
 * Shapes zod's JSON Schema so that clients generated from the document with openapi-generator's default options
 * work, from 7.16 on (test/generatedClients.spec.ts), without changing what the server takes or answers:
 *
 * - No `additionalProperties: false`. typescript-fetch 7.16 then treats a model as open and spreads its
 *   camelCase fields into the body beside the snake_case ones (`400 metric.metricName: Unknown field`); python
 *   7.16 fails to generate. The server still refuses unknown fields of a body (400 `validation_error`), as the
 *   document's description says.
 * - A nullable scalar as `type: [T, "null"]`, not `anyOf: [{type: T}, {type: "null"}]`, which python 7.16's
 *   getPydanticType cannot type.
 * - No `pattern` beside `format: uuid` or `date-time`: python puts the pattern on the parsed value (a UUID or a
 *   datetime, not a string) and fails on every answer.
 */
function forCodeGenerators(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(forCodeGenerators);
  if (node === null || typeof node !== 'object') return node;
  const out: Json = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === 'additionalProperties' && v === false) continue;
    out[k] = forCodeGenerators(v);
  }
  if (typeof out.format === 'string' && FORMATS_WITHOUT_PATTERN.has(out.format)) delete out.pattern;
  const anyOf = out.anyOf;
  if (Array.isArray(anyOf) && anyOf.length === 2) {
    const isNull = (x: unknown) => same(x, { type: 'null' });
    const other = anyOf.find((x) => !isNull(x)) as Json | undefined;
    if (anyOf.some(isNull) && other && typeof other.type === 'string' && other.$ref === undefined) {
      const { anyOf: _a, ...rest } = out;
      return { ...other, ...rest, type: [other.type, 'null'] };
    }
  }
  return out;
}

/**
 * JSON Schema patterns have no flags, and zod writes a regex's source without them: a `/…/i` check would be
 * documented as case-sensitive. Contracts write both cases out (`[0-9a-fA-F]`); one that does not is refused here.
 */
function noRegexFlags(ctx: { zodSchema: unknown }): void {
  const internals = (ctx.zodSchema as { _zod?: { bag?: { patterns?: Set<RegExp> }; def?: { checks?: { _zod: { def: { pattern?: unknown } } }[] } } })._zod;
  const patterns = [...(internals?.bag?.patterns ?? []), ...(internals?.def?.checks ?? []).map((c) => c._zod.def.pattern)];
  const flagged = patterns.find((p): p is RegExp => p instanceof RegExp && /[ims]/.test(p.flags));
  if (flagged) throw new Error(`buildOpenApi: /${flagged.source}/${flagged.flags} has flags JSON Schema cannot say: write the cases out`);
}

const DEFS = '#/$defs/';
const COMPONENTS = '#/components/schemas/';

function mapRefs(node: unknown, ref: (r: string) => string): unknown {
  if (Array.isArray(node)) return node.map((n) => mapRefs(n, ref));
  if (node === null || typeof node !== 'object') return node;
  return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, k === '$ref' && typeof v === 'string' ? ref(v) : mapRefs(v, ref)]));
}

function refsOf(node: unknown, out = new Set<string>()): Set<string> {
  if (Array.isArray(node)) for (const n of node) refsOf(n, out);
  else if (node !== null && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k === '$ref' && typeof v === 'string' && v.startsWith(DEFS)) out.add(v.slice(DEFS.length));
      else refsOf(v, out);
    }
  }
  return out;
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/**
 * Moves the schemas zod names (`.meta({ id })`) out of each generated schema's `$defs` into
 * `components.schemas`: inside an OpenAPI document `#/$defs/X` would resolve against the document's root,
 * where nothing is. A schema whose input form (defaults make fields optional) differs from its output
 * form gets a second entry, `<id>Input`. Output forms must all be added before any input form.
 */
class Components {
  readonly schemas: Record<string, Json> = {};
  private readonly outputs = new Map<string, string>();
  private inputsStarted = false;

  add(s: z.ZodType, io: Io): Json {
    const { $schema: _s, $defs, ...top } = jsonSchema(s, io) as Json & { $defs?: Record<string, Json> };
    const defs = $defs ?? {};
    if (io === 'output' && this.inputsStarted) throw new Error('buildOpenApi: output schemas go in before input schemas');
    if (io === 'input') this.inputsStarted = true;
    // An input form differs when its own text differs or it refers to one that differs.
    const differs = new Set(io === 'input' ? Object.keys(defs).filter((id) => this.outputs.has(id) && this.outputs.get(id) !== JSON.stringify(defs[id])) : []);
    for (let grew = true; grew;) {
      grew = false;
      for (const id of Object.keys(defs)) {
        if (!differs.has(id) && this.outputs.has(id) && [...refsOf(defs[id])].some((r) => differs.has(r))) {
          differs.add(id);
          grew = true;
        }
      }
    }
    const name = (id: string) => (differs.has(id) ? `${id}Input` : id);
    const ref = (r: string) => (r.startsWith(DEFS) ? COMPONENTS + name(r.slice(DEFS.length)) : r);
    for (const [id, def] of Object.entries(defs)) {
      if (io === 'output') this.outputs.set(id, JSON.stringify(def));
      const body = mapRefs(def, ref) as Json;
      const existing = this.schemas[name(id)];
      if (existing && !same(existing, body)) throw new Error(`buildOpenApi: two different schemas named ${name(id)}`);
      this.schemas[name(id)] = body;
    }
    return mapRefs(top, ref) as Json;
  }
}

const errorDescriptions: Record<number, string> = {
  400: 'validation_error, invalid_json, invalid_cursor or invalid_shop',
  401: 'unauthorized: missing, unknown or revoked API key',
  403: 'forbidden: the key is not granted this shop',
  404: 'not_found',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  429: 'rate_limited',
  500: 'internal_error: an unexpected failure on our side, logged with the request id',
  503: 'unavailable: retry after Retry-After seconds',
};

/** Every answer carries it; error bodies repeat it as `error.request_id`. */
const requestIdHeader: OpenApiHeaders = { 'X-Request-Id': "The request id: the caller's X-Request-Id when it is a valid one, else a new uuid." };

const headerObjects = (headers: OpenApiHeaders) =>
  Object.fromEntries(
    Object.entries({ ...requestIdHeader, ...headers }).map(([h, d]) => {
      const { description, type = 'string', required = true } = typeof d === 'string' ? { description: d } : d;
      return [h, { description, required, schema: { type } }];
    }),
  );

const tagDescriptions: Record<string, string> = {
  Events: 'Record customer events (producers).',
  Activities: 'Read Activities and contact timelines.',
  Flows: 'Activity Event flows and what they matched.',
  Conversations: 'Export support conversations (backfills and syncs).',
};

/**
 * A query parameter's schema as a client should send it. A string of digits (`^\d+$`, `^\d{1,6}$`) that the route
 * turns into an integer (`limit`) is documented as that integer, so generated clients take a number; everything else in
 * its input form.
 */
function queryParamSchema(s: z.ZodType, components: Components): Json {
  const input = components.add(s, 'input');
  const output = jsonSchema(s, 'output');
  const digits = input.type === 'string' && typeof input.pattern === 'string' && /^\^\\d(\+|\{\d+(,\d*)?\})\$$/.test(input.pattern);
  if (digits && output.type === 'integer') {
    const { $schema: _s, ...rest } = output;
    return { ...rest, ...(input.description ? { description: input.description } : {}) };
  }
  return input;
}

/** An OpenAPI 3.1 document generated from the zod contracts the routes validate with. */
export function buildOpenApi(title: string, parts: OpenApiPart[], serverUrl?: string): Record<string, unknown> {
  const components = new Components();
  const errorBody = components.add(errorBodySchema, 'output');
  const ops = parts.flatMap((p) => p.operations);
  // Responses first: Components names the output form of a schema by its id.
  const responsesOf = ops.map((op) => {
    const responses: Record<string, unknown> = {};
    for (const [status, r] of Object.entries(op.responses)) {
      responses[status] = {
        description: r.description,
        headers: headerObjects(r.headers ?? {}),
        ...(r.schema ? { content: { 'application/json': { schema: components.add(r.schema, 'output') } } } : {}),
      };
    }
    // Any operation can fail unexpectedly: 500 with the error body is documented everywhere.
    for (const status of [...op.errors, ...(op.errors.includes(500) ? [] : [500])]) {
      responses[String(status)] = {
        description: errorDescriptions[status] ?? 'error',
        headers: headerObjects(op.errorHeaders?.[status] ?? {}),
        content: { 'application/json': { schema: errorBody } },
      };
    }
    return responses;
  });
  const paths: Record<string, Record<string, unknown>> = {};
  ops.forEach((op, i) => {
    const parameters = [
      ...(op.params ?? []).map((p) => ({
        name: p.name,
        in: p.in,
        required: p.in === 'path' ? true : (p.required ?? false),
        description: p.description,
        schema: components.add(p.schema, 'input'),
      })),
      ...Object.entries(op.query?.shape ?? {}).map(([name, s]) => ({
        name,
        in: 'query',
        required: !(s as z.ZodType).safeParse(undefined).success,
        schema: queryParamSchema(s as z.ZodType, components),
        description: (s as z.ZodType).description,
      })),
    ];
    paths[op.path] ??= {};
    paths[op.path][op.method] = {
      operationId: op.operationId,
      summary: op.summary,
      description: op.description,
      tags: op.tags,
      parameters,
      ...(op.body
        ? {
            requestBody: {
              required: true,
              content: {
                'application/json': { schema: components.add(op.body, 'input'), ...(op.bodyExample !== undefined ? { example: op.bodyExample } : {}) },
              },
            },
          }
        : {}),
      responses: responsesOf[i],
    };
  });
  const tagNames = [...new Set(ops.flatMap((op) => op.tags))];
  return {
    openapi: '3.1.0',
    info: {
      title: `Shopstream ${title}`,
      version: '2026-04',
      description:
        'Event recording and conversation export, one shop per request. Request bodies and query strings refuse fields they do not list (400 validation_error), though the schemas do not say additionalProperties: false (generated clients mishandle it).',
      license: { name: 'MIT', identifier: 'MIT' },
    },
    // PUBLIC_BASE_URL when set; else where `pnpm start` listens by default. The served /openapi.json names the
    // origin each request came to instead (runtime's serve()).
    servers: [serverUrl ? { url: serverUrl } : { url: 'http://localhost:8080', description: 'pnpm start (PORT 8080)' }],
    // Both on every request: the key, and the shop it addresses (one key may be granted several shops).
    security: [{ bearer: [], shopId: [] }],
    tags: tagNames.map((name) => ({ name, description: tagDescriptions[name] ?? name })),
    paths,
    components: {
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description: 'API key created with `pnpm cli api-keys create`.' },
        shopId: { type: 'apiKey', in: 'header', name: 'X-Shop-Id', description: 'The uuid of the shop addressed; the key must be granted it.' },
      },
      schemas: components.schemas,
    },
  };
}

/** /docs: Swagger UI from the swagger-ui-dist package, served from this process (works offline). */
export function docsHandler(): RequestHandler {
  const require = createRequire(import.meta.url);
  const assets = (require('swagger-ui-dist') as { getAbsoluteFSPath(): string }).getAbsoluteFSPath();
  const statics = express.static(assets, { index: false });
  const page = `<!doctype html><html><head><meta charset="utf-8"><title>Shopstream API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css"></head><body>
<p style="font-family:sans-serif;margin:1em 2em">HTTP API below. Kafka topics: <a href="/asyncapi.json">/asyncapi.json</a> (AsyncAPI 3.0; record schemas in packages/contracts/schemas).</p>
<div id="ui"></div>
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
