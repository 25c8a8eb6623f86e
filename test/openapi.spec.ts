import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { conversationsTopic, type ConversationData, type ConversationRecord } from '@shopstream/contracts';
import { createKafkaBus } from '@shopstream/bus';
import { sql } from '@shopstream/db';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { serviceFactories } from '@shopstream/all-in-one';
import { createTestShop, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';
import { testConversation as conversation } from '@shopstream/testkit';

/**
 * Black box: every service in one server, and every answer of every operation checked against the
 * OpenAPI document that server serves at /openapi.json: the status is one the operation documents, the
 * body validates against that status's schema, the required response headers are there and well-typed.
 * Then the document is held to the routes: every route the services mount is documented, every
 * documented operation and status was reached here.
 */

// ajv-formats is CommonJS: under NodeNext its default import is the module object.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (ajv: Ajv2020) => Ajv2020;

type Method = 'get' | 'post' | 'patch' | 'delete';
type Shop = Awaited<ReturnType<typeof createTestShop>>;
type Answer = { status: number; body: any; text: string; headers: Headers };
type Json = Record<string, any>;

/** The base URI the document is registered under: its `#/components/schemas/...` refs resolve in it. */
const DOC_ID = 'https://shopstream.test/openapi.json';
const EXPORT_LIMIT = 8;
/** Headers of HTTP itself, which an OpenAPI document does not list. */
const HTTP_HEADERS = new Set(['content-type', 'content-length', 'date', 'connection', 'keep-alive', 'transfer-encoding']);
/** Statuses the document lists that this test does not reach, with why. Kept short on purpose. */
const UNREACHED: Record<string, number[]> = {};

let rt: Runtime;
let started: StartedService[];
let server: TestServer;
let doc: Json;
let ajv: Ajv2020;
let a: Shop;
let b: Shop;

/** operation key (`post /v2026-04/events/`) → statuses seen. */
const reached = new Map<string, Set<number>>();
const validators = new Map<string, ValidateFunction>();

const pointer = (...segments: string[]) => `${DOC_ID}#/${segments.map((s) => encodeURIComponent(s.replace(/~/g, '~0').replace(/\//g, '~1'))).join('/')}`;
function validatorAt(ptr: string): ValidateFunction {
  let v = validators.get(ptr);
  if (!v) validators.set(ptr, (v = ajv.compile({ $ref: ptr })));
  return v;
}
function expectValid(ptr: string, value: unknown, what: string) {
  const v = validatorAt(ptr);
  expect(
    v(value),
    `${what} against ${decodeURIComponent(ptr)}: ${ajv.errorsText(v.errors, { separator: '\n' })}\n${JSON.stringify(value)?.slice(0, 2000)}`,
  ).toBe(true);
}
function operation(method: Method, template: string): Json {
  const op = doc.paths[template]?.[method];
  expect(op, `${method.toUpperCase()} ${template} is not in the document`).toBeDefined();
  return op;
}

interface Call {
  method: Method;
  /** The documented path template; `path` is the concrete one when the template has parameters. */
  template: string;
  path?: string;
  query?: Record<string, string>;
  headers?: Record<string, string>;
  body?: unknown;
  /** Sent as is, instead of JSON.stringify(body). */
  raw?: string;
  /** The request is one the document describes as valid: its parameters and body validate against it. */
  documented?: boolean;
  /** Another server answering the same operation (the one with Kafka down). */
  baseUrl?: string;
}

/** Makes the request and checks the answer against the document. */
async function call(c: Call): Promise<Answer> {
  const op = operation(c.method, c.template);
  const path = c.path ?? c.template;
  const url = `${c.baseUrl ?? server.baseUrl}${path}${c.query ? `?${new URLSearchParams(c.query)}` : ''}`;
  if (c.documented) expectDocumentedRequest(c, op, path);
  const res = await fetch(url, {
    method: c.method.toUpperCase(),
    headers: c.headers,
    body: c.raw ?? (c.body === undefined ? undefined : JSON.stringify(c.body)),
  });
  const text = await res.text();
  const key = `${c.method} ${c.template}`;
  const what = `${c.method.toUpperCase()} ${path} answered ${res.status}`;
  const response = op.responses[String(res.status)];
  expect(response, `${what}, a status the document does not list for it: ${text.slice(0, 500)}`).toBeDefined();
  let body: unknown = null;
  if (response.content) {
    expect(Object.keys(response.content)).toEqual(['application/json']);
    expect(res.headers.get('content-type'), what).toMatch(/^application\/json\b/);
    body = JSON.parse(text);
    expectValid(pointer('paths', c.template, c.method, 'responses', String(res.status), 'content', 'application/json', 'schema'), body, what);
  } else {
    expect(text, `${what} with a body the document does not describe`).toBe('');
  }
  for (const [name, h] of Object.entries<Json>(response.headers ?? {})) {
    const value = res.headers.get(name);
    if (h.required) expect(value, `${what} without the documented header ${name}`).not.toBeNull();
    if (value === null) continue;
    const schemaPtr = pointer('paths', c.template, c.method, 'responses', String(res.status), 'headers', name, 'schema');
    // Header values are text: an integer header must be digits that then validate as a number.
    const typed = h.schema?.type === 'integer' ? (/^-?\d+$/.test(value) ? Number(value) : value) : value;
    expectValid(schemaPtr, typed, `${what}: header ${name}`);
  }
  // The other way round: a header of its own the server sends must be in the document.
  const documentedHeaders = new Set(Object.keys(response.headers ?? {}).map((h) => h.toLowerCase()));
  const undocumented = [...res.headers.keys()].filter((h) => !HTTP_HEADERS.has(h) && !documentedHeaders.has(h));
  expect(undocumented, `${what} with headers the document does not list`).toEqual([]);
  if (!reached.has(key)) reached.set(key, new Set());
  reached.get(key)!.add(res.status);
  return { status: res.status, body, text, headers: res.headers };
}

/** The request is valid per the document: path and query parameters and the body validate. */
function expectDocumentedRequest(c: Call, op: Json, path: string) {
  const params = op.parameters as Json[];
  const templateParts = c.template.split('/');
  const pathParts = path.split('/');
  params.forEach((p, i) => {
    const ptr = pointer('paths', c.template, c.method, 'parameters', String(i), 'schema');
    if (p.in === 'path') expectValid(ptr, pathParts[templateParts.indexOf(`{${p.name}}`)], `path parameter ${p.name}`);
    // On the wire every query value is text; an integer parameter is its digits (as the header check above).
    const raw = c.query?.[p.name];
    const value = p.schema?.type === 'integer' && typeof raw === 'string' && /^-?\d+$/.test(raw) ? Number(raw) : raw;
    if (p.in === 'query' && raw !== undefined) expectValid(ptr, value, `query parameter ${p.name}`);
    if (p.in === 'query' && p.required) expect(c.query?.[p.name], `required query parameter ${p.name}`).toBeDefined();
  });
  const known = new Set(params.filter((p) => p.in === 'query').map((p) => p.name));
  for (const q of Object.keys(c.query ?? {})) expect(known.has(q), `query parameter ${q} is not documented`).toBe(true);
  expect(c.body !== undefined, 'a body exactly when the document has a requestBody').toBe(op.requestBody !== undefined);
  if (op.requestBody) expectValid(pointer('paths', c.template, c.method, 'requestBody', 'content', 'application/json', 'schema'), c.body, 'request body');
}

/** The request is invalid per the document too (where JSON Schema can say so). */
function expectDocumentRejects(template: string, method: Method, body: unknown) {
  const v = validatorAt(pointer('paths', template, method, 'requestBody', 'content', 'application/json', 'schema'));
  expect(v(body), `the document accepts ${JSON.stringify(body).slice(0, 200)}`).toBe(false);
}

function expectError(r: Answer, status: number, code: string) {
  expect(r.status, r.text.slice(0, 500)).toBe(status);
  expect(r.body.error.code).toBe(code);
  expect(r.body.error.request_id).toBe(r.headers.get('x-request-id'));
}

/** Every route the services' routers mount, as `method /v2026-04/path/{param}/`. */
function mountedRoutes(router: NonNullable<StartedService['router']>, prefix = '/v2026-04'): string[] {
  const out: string[] = [];
  for (const layer of (router as unknown as { stack: any[] }).stack) {
    if (layer.route) {
      for (const m of Object.keys(layer.route.methods).filter((k) => k !== '_all' && layer.route.methods[k])) {
        out.push(`${m} ${prefix}${String(layer.route.path).replace(/:(\w+)/g, '{$1}')}`);
      }
    } else if (Array.isArray(layer.handle?.stack)) {
      // Only routers mounted without a path: one mounted under a path would need its prefix here.
      expect(layer.slash, 'a router mounted under a path: teach mountedRoutes its prefix').toBe(true);
      out.push(...mountedRoutes(layer.handle, prefix));
    }
  }
  return out;
}

const event = (over: Json = {}) => ({
  name: 'Placed order',
  metric: { metric_name: 'placed_order', value: 42, additional_properties: { cart: { total: 42 } } },
  ...over,
});
const big = (bytes: number) => 'x'.repeat(bytes);

beforeAll(async () => {
  rt = await startTestRuntime(
    {
      CONSUMER_GROUP_PREFIX: `openapi-spec-${randomUUID()}.`,
      EXPORT_RATE_LIMIT_PER_MINUTE: String(EXPORT_LIMIT),
      // The matcher sees a flow created over HTTP sooner.
      FLOW_REFRESH_MS: '200',
    },
    'openapi-spec',
  );
  started = [];
  for (const factory of Object.values(serviceFactories)) started.push(await factory(rt));
  server = await startTestServer(rt, started);
  a = await createTestShop(rt);
  b = await createTestShop(rt);
  const res = await fetch(`${server.baseUrl}/openapi.json`);
  expect(res.status).toBe(200);
  doc = await res.json();
  ajv = new Ajv2020({ allErrors: true, strict: true, allowUnionTypes: true });
  addFormats(ajv);
  // The document's own fields are not JSON Schema keywords; known to ajv, they keep strict mode on for the schemas.
  ajv.addVocabulary(['openapi', 'info', 'servers', 'security', 'paths', 'components', 'webhooks', 'jsonSchemaDialect', 'tags', 'externalDocs']);
  ajv.addSchema({ ...doc, $id: DOC_ID });
});
afterAll(async () => {
  // Also stops the services and closes the runtime.
  await server?.stop();
});

describe('the OpenAPI document', () => {
  it('is OpenAPI 3.1 and every schema in it compiles, with every $ref resolving inside the document', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.paths).length).toBeGreaterThan(0);
    let n = 0;
    for (const [path, ops] of Object.entries<Json>(doc.paths)) {
      for (const [method, op] of Object.entries<Json>(ops)) {
        (op.parameters as Json[]).forEach((_p, i) => validatorAt(pointer('paths', path, method, 'parameters', String(i), 'schema')) && n++);
        if (op.requestBody) validatorAt(pointer('paths', path, method, 'requestBody', 'content', 'application/json', 'schema')) && n++;
        for (const [status, r] of Object.entries<Json>(op.responses)) {
          if (r.content) validatorAt(pointer('paths', path, method, 'responses', status, 'content', 'application/json', 'schema')) && n++;
          for (const h of Object.keys(r.headers ?? {})) validatorAt(pointer('paths', path, method, 'responses', status, 'headers', h, 'schema')) && n++;
        }
      }
    }
    for (const name of Object.keys(doc.components.schemas)) validatorAt(pointer('components', 'schemas', name)) && n++;
    expect(n).toBeGreaterThan(100);
    // zod's local `#/$defs/...` refs would point at the document's root, where there is nothing.
    expect(JSON.stringify(doc)).not.toContain('$defs');
  });

  it('documents 500 with the error body on every operation', () => {
    const ops = Object.entries<Json>(doc.paths).flatMap(([path, o]) =>
      Object.entries<Json>(o).map(([m, op]) => ({ op: `${m} ${path}`, r: op.responses['500'] })),
    );
    expect(ops.length).toBeGreaterThan(0);
    for (const { op, r } of ops)
      expect({ op, schema: r?.content?.['application/json']?.schema }).toEqual({ op, schema: { $ref: '#/components/schemas/ErrorBody' } });
  });

  it('documents exactly the routes the services mount', () => {
    const mounted = started.flatMap((s) => (s.router ? mountedRoutes(s.router) : []));
    const documented = Object.entries<Json>(doc.paths).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m} ${path}`));
    expect(mounted.length).toBeGreaterThan(0);
    expect(new Set(mounted).size).toBe(mounted.length);
    expect([...mounted].sort()).toEqual([...documented].sort());
  });
});

describe('/docs', () => {
  it('serves Swagger UI and every asset it loads from this server (offline)', async () => {
    const page = await fetch(`${server.baseUrl}/docs`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html\b/);
    const html = await page.text();
    expect(html).toContain("url: '/openapi.json'");
    // What the page loads (scripts, stylesheets) must come from this server; the links it offers are checked too.
    const assets = [...html.matchAll(/<(?:script|link)\b[^>]*(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
    expect(assets.sort()).toEqual(['/docs/swagger-ui-bundle.js', '/docs/swagger-ui.css']);
    const links = [...html.matchAll(/<a\b[^>]*href="([^"]+)"/g)].map((m) => m[1]);
    expect(links).toEqual(['/asyncapi.json']);
    expect((await fetch(`${server.baseUrl}/asyncapi.json`)).status).toBe(200);
    const js = await fetch(`${server.baseUrl}/docs/swagger-ui-bundle.js`);
    expect(js.status).toBe(200);
    expect(js.headers.get('content-type')).toMatch(/^(application|text)\/javascript\b/);
    expect((await js.text()).length).toBeGreaterThan(100_000);
    const css = await fetch(`${server.baseUrl}/docs/swagger-ui.css`);
    expect(css.status).toBe(200);
    expect(css.headers.get('content-type')).toMatch(/^text\/css\b/);
    expect((await css.text()).length).toBeGreaterThan(1_000);
    expect((await fetch(`${server.baseUrl}/docs/`)).status).toBe(200);
  });
});

describe('every operation, answers checked against the document', () => {
  it('answers 401 without a key and with an unknown one, 400 invalid_shop, 403 for a shop the key lacks', async () => {
    for (const [template, ops] of Object.entries<Json>(doc.paths)) {
      for (const method of Object.keys(ops) as Method[]) {
        const path = template.replace(/\{\w+\}/g, randomUUID());
        const body = method === 'post' || method === 'patch' ? {} : undefined;
        const { authorization: _auth, ...noKey } = a.headers;
        expectError(await call({ method, template, path, body, headers: noKey }), 401, 'unauthorized');
        expectError(await call({ method, template, path, body, headers: { ...a.headers, authorization: 'Bearer not-a-key' } }), 401, 'unauthorized');
        expectError(await call({ method, template, path, body, headers: { ...a.headers, 'x-shop-id': 'not-a-uuid' } }), 400, 'invalid_shop');
        expectError(await call({ method, template, path, body, headers: { ...a.headers, 'x-shop-id': b.shopId } }), 403, 'forbidden');
      }
    }
  });

  describe('events', () => {
    it('POST /v2026-04/events/: 202 with and without a contact, 400, 413, 415', async () => {
      const t = '/v2026-04/events/';
      const withContact = await call({
        method: 'post',
        template: t,
        headers: a.headers,
        body: event({ contact: { email: 'ada@example.com' } }),
        documented: true,
      });
      expect(withContact.status).toBe(202);
      expect(withContact.body).toEqual({ activity_id: expect.any(String), contact: { id: expect.any(String), email: 'ada@example.com' } });
      const workspace = await call({
        method: 'post',
        template: t,
        headers: a.headers,
        body: event({ description: 'no contact', remote_id: `o-${randomUUID()}`, remote_platform: 'shop' }),
        documented: true,
      });
      expect(workspace.status).toBe(202);
      expect(workspace.body).toEqual({ activity_id: expect.any(String) });

      const noMetric = { name: 'No metric' };
      expectDocumentRejects(t, 'post', noMetric);
      const invalid = await call({ method: 'post', template: t, headers: a.headers, body: noMetric });
      expectError(invalid, 400, 'validation_error');
      expect(Object.keys(invalid.body.error.fields)).toEqual(['metric']);
      expectError(await call({ method: 'post', template: t, headers: a.headers, raw: '{"name":' }), 400, 'invalid_json');
      expectError(
        await call({ method: 'post', template: t, headers: { ...a.headers, 'content-type': 'text/plain' }, raw: JSON.stringify(event()) }),
        415,
        'unsupported_media_type',
      );
      expectError(
        await call({ method: 'post', template: t, headers: a.headers, body: event({ description: big(1024 * 1024 + 1) }) }),
        413,
        'payload_too_large',
      );
    });

    it('POST /v2026-04/events/bulk/: 200 with a success and an error item, 400, 413, 415', async () => {
      const t = '/v2026-04/events/bulk/';
      const ok = await call({
        method: 'post',
        template: t,
        headers: a.headers,
        body: { events: [event(), event({ contact: { phone: '+14155550100' } })] },
        documented: true,
      });
      expect(ok.status).toBe(200);
      expect(ok.body.results.map((r: Json) => [r.index, r.status])).toEqual([
        [0, 'success'],
        [1, 'success'],
      ]);
      // One bad item fails alone: the answer still validates, with the error in its result.
      const mixed = await call({ method: 'post', template: t, headers: a.headers, body: { events: [event(), { name: 'no metric' }] } });
      expect(mixed.status).toBe(200);
      expect(mixed.body.results.map((r: Json) => [r.index, r.status])).toEqual([
        [0, 'success'],
        [1, 'error'],
      ]);
      expect(mixed.body.results[1].error).toMatchObject({
        code: 'validation_error',
        request_id: mixed.headers.get('x-request-id'),
        fields: { metric: expect.any(String) },
      });

      expectDocumentRejects(t, 'post', { events: [] });
      expectError(await call({ method: 'post', template: t, headers: a.headers, body: { events: [] } }), 400, 'validation_error');
      expectDocumentRejects(t, 'post', { events: Array.from({ length: 101 }, () => event()) });
      expectError(
        await call({ method: 'post', template: t, headers: a.headers, body: { events: Array.from({ length: 101 }, () => event()) } }),
        400,
        'validation_error',
      );
      expectError(await call({ method: 'post', template: t, headers: a.headers, raw: '[' }), 400, 'invalid_json');
      expectError(
        await call({ method: 'post', template: t, headers: { ...a.headers, 'content-type': 'text/plain' }, raw: '{"events":[]}' }),
        415,
        'unsupported_media_type',
      );
      expectError(
        await call({ method: 'post', template: t, headers: a.headers, body: { events: [event({ description: big(10 * 1024 * 1024 + 1) })] } }),
        413,
        'payload_too_large',
      );
    });

    it('both event endpoints answer 503 with Retry-After when Kafka cannot take the write', async () => {
      // The ingest service on a Kafka client pointed at a closed port (openRuntime cannot start there).
      const deadBus = await createKafkaBus({
        brokers: ['127.0.0.1:1'],
        clientId: 'openapi-dead',
        replicationFactor: 1,
        logger: rt.logger,
        publishTimeoutMs: 1_000,
      });
      const deadRt: Runtime = { ...rt, bus: deadBus, close: async () => {} };
      const dead = await startTestServer(deadRt, [await serviceFactories['ingest-api'](deadRt)]);
      try {
        const single = await call({ method: 'post', template: '/v2026-04/events/', headers: a.headers, body: event(), baseUrl: dead.baseUrl });
        expectError(single, 503, 'unavailable');
        const bulk = await call({ method: 'post', template: '/v2026-04/events/bulk/', headers: a.headers, body: { events: [event()] }, baseUrl: dead.baseUrl });
        expectError(bulk, 503, 'unavailable');
      } finally {
        await dead.stop();
        await deadBus.close();
      }
    });
  });

  it('both event endpoints answer 429 with Retry-After and the RateLimit headers over the per-key limit (202/200 with them before)', async () => {
    // The ingest service with a limit of 3 events a minute (1 every 20 s: nothing refills during the test).
    const limitedRt: Runtime = { ...rt, env: { ...rt.env, INGEST_RATE_LIMIT_PER_SECOND: 0, INGEST_RATE_LIMIT_PER_MINUTE: 3 }, close: async () => {} };
    const limited = await startTestServer(limitedRt, [await serviceFactories['ingest-api'](limitedRt)]);
    try {
      const c = await createTestShop(rt);
      const d = await createTestShop(rt);
      for (let i = 0; i < 3; i++) {
        const ok = await call({ method: 'post', template: '/v2026-04/events/', headers: c.headers, body: event(), documented: true, baseUrl: limited.baseUrl });
        expect(ok.status).toBe(202);
        expect(ok.headers.get('ratelimit-policy')).toBe('"steady";q=3;w=60');
      }
      const single = await call({ method: 'post', template: '/v2026-04/events/', headers: c.headers, body: event(), baseUrl: limited.baseUrl });
      expectError(single, 429, 'rate_limited');
      const ok = await call({
        method: 'post',
        template: '/v2026-04/events/bulk/',
        headers: d.headers,
        body: { events: [event(), event()] },
        documented: true,
        baseUrl: limited.baseUrl,
      });
      expect(ok.status).toBe(200);
      expect(ok.headers.get('ratelimit-remaining')).toBe('1');
      const bulk = await call({
        method: 'post',
        template: '/v2026-04/events/bulk/',
        headers: d.headers,
        body: { events: [event(), event()] },
        baseUrl: limited.baseUrl,
      });
      expectError(bulk, 429, 'rate_limited');
      expect(Number(bulk.headers.get('retry-after'))).toBeGreaterThan(1);
    } finally {
      await limited.stop();
    }
  });

  describe('activities', () => {
    it('GET an activity, the workspace list and a contact timeline: 200 once projected, 400, 404', async () => {
      const posted = await call({
        method: 'post',
        template: '/v2026-04/events/',
        headers: a.headers,
        body: event({ contact: { email: 'tim@example.com', name: 'Tim' } }),
      });
      const workspace = await call({ method: 'post', template: '/v2026-04/events/', headers: a.headers, body: event({ name: 'Workspace thing' }) });
      const activityId: string = posted.body.activity_id;
      const contactId: string = posted.body.contact.id;

      const one = '/v2026-04/activities/{id}/';
      await waitFor(async () => (await fetch(`${server.baseUrl}/v2026-04/activities/${workspace.body.activity_id}/`, { headers: a.headers })).status === 200, {
        message: 'activity projected',
      });
      await waitFor(async () => (await fetch(`${server.baseUrl}/v2026-04/activities/${activityId}/`, { headers: a.headers })).status === 200, {
        message: 'activity projected',
      });
      const got = await call({ method: 'get', template: one, path: `/v2026-04/activities/${activityId}/`, headers: a.headers, documented: true });
      expect(got.status).toBe(200);
      expect(got.body).toMatchObject({ id: activityId, name: 'Placed order', contact: { id: contactId, email: 'tim@example.com' } });
      expectError(await call({ method: 'get', template: one, path: `/v2026-04/activities/${randomUUID()}/`, headers: a.headers }), 404, 'not_found');
      expectError(await call({ method: 'get', template: one, path: `/v2026-04/activities/${activityId}/`, headers: b.headers }), 404, 'not_found');

      const list = '/v2026-04/activities/';
      const page = await call({ method: 'get', template: list, path: list, query: { scope: 'workspace', limit: '1' }, headers: a.headers, documented: true });
      expect(page.status).toBe(200);
      expect(page.body.results.length).toBe(1);
      expect(page.body.results[0].contact).toBeNull();
      expect(page.body.next).toEqual(expect.any(String));
      const next = new URL(page.body.next);
      const second = await call({
        method: 'get',
        template: list,
        path: list,
        query: Object.fromEntries(next.searchParams),
        headers: a.headers,
        documented: true,
      });
      expect(second.status).toBe(200);
      expect(second.body.previous).toEqual(expect.any(String));
      expectError(await call({ method: 'get', template: list, headers: a.headers }), 400, 'validation_error');
      expectError(await call({ method: 'get', template: list, query: { scope: 'workspace', cursor: 'garbage' }, headers: a.headers }), 400, 'invalid_cursor');

      const timeline = '/v2026-04/contacts/{contact_id}/timeline/';
      const timelinePath = `/v2026-04/contacts/${contactId}/timeline/`;
      await waitFor(async () => ((await (await fetch(`${server.baseUrl}${timelinePath}`, { headers: a.headers })).json()) as Json).results?.length === 1, {
        message: 'timeline projected',
      });
      const tl = await call({ method: 'get', template: timeline, path: timelinePath, query: { limit: '10' }, headers: a.headers, documented: true });
      expect(tl.status).toBe(200);
      expect(tl.body.results.map((r: Json) => r.id)).toEqual([activityId]);
      expect(tl.body.next).toBeNull();
      expectError(await call({ method: 'get', template: timeline, path: timelinePath, query: { limit: '0' }, headers: a.headers }), 400, 'validation_error');
      expectError(
        await call({ method: 'get', template: timeline, path: `/v2026-04/contacts/${randomUUID()}/timeline/`, headers: a.headers }),
        404,
        'not_found',
      );
    });
  });

  describe('flows', () => {
    it('create, list, get, change, read triggers, delete: success and error answers', async () => {
      const col = '/v2026-04/flows/';
      const one = '/v2026-04/flows/{id}/';
      const triggers = '/v2026-04/flows/{id}/triggers/';
      const metric = `openapi_probe_${randomUUID().slice(0, 8)}`;
      const create = {
        name: 'Probe',
        trigger: {
          metric_name: metric,
          property_conditions: [{ field: 'cart.total', op: 'gte', value: 10 }],
          contact_conditions: [{ field: 'email', op: 'exists' }],
        },
      };
      const created = await call({ method: 'post', template: col, headers: a.headers, body: create, documented: true });
      expect(created.status).toBe(201);
      const id: string = created.body.id;
      expect(created.headers.get('location')).toBe(`/v2026-04/flows/${id}/`);
      const other = await call({
        method: 'post',
        template: col,
        headers: a.headers,
        body: { name: 'To delete', status: 'paused', trigger: { metric_name: 'x' } },
        documented: true,
      });
      expect(other.status).toBe(201);

      expectDocumentRejects(col, 'post', { name: 'No trigger' });
      expectError(await call({ method: 'post', template: col, headers: a.headers, body: { name: 'No trigger' } }), 400, 'validation_error');
      expectError(await call({ method: 'post', template: col, headers: a.headers, raw: '{' }), 400, 'invalid_json');
      expectError(
        await call({ method: 'post', template: col, headers: { ...a.headers, 'content-type': 'text/plain' }, raw: JSON.stringify(create) }),
        415,
        'unsupported_media_type',
      );
      expectError(await call({ method: 'post', template: col, headers: a.headers, body: { ...create, name: big(300 * 1024) } }), 413, 'payload_too_large');

      const list = await call({ method: 'get', template: col, query: { status: 'active', limit: '5' }, headers: a.headers, documented: true });
      expect(list.status).toBe(200);
      expect(list.body.results.map((f: Json) => f.id)).toEqual([id]);
      const all = await call({ method: 'get', template: col, query: { limit: '1' }, headers: a.headers, documented: true });
      expect(all.body.results.map((f: Json) => f.id)).toEqual([other.body.id]);
      expect(all.body.next).toEqual(expect.any(String));
      expectError(await call({ method: 'get', template: col, query: { status: 'bogus' }, headers: a.headers }), 400, 'validation_error');
      expectError(await call({ method: 'get', template: col, query: { cursor: 'garbage' }, headers: a.headers }), 400, 'invalid_cursor');

      const got = await call({ method: 'get', template: one, path: `/v2026-04/flows/${id}/`, headers: a.headers, documented: true });
      expect(got.status).toBe(200);
      expect(got.body).toEqual(created.body);
      expectError(await call({ method: 'get', template: one, path: `/v2026-04/flows/${randomUUID()}/`, headers: a.headers }), 404, 'not_found');
      expectError(await call({ method: 'get', template: one, path: '/v2026-04/flows/not-an-id/', headers: a.headers }), 404, 'not_found');

      const patched = await call({
        method: 'patch',
        template: one,
        path: `/v2026-04/flows/${id}/`,
        headers: a.headers,
        body: { name: 'Probe (renamed)' },
        documented: true,
      });
      expect(patched.status).toBe(200);
      expect(patched.body).toMatchObject({ id, name: 'Probe (renamed)', status: 'active' });
      expectError(await call({ method: 'patch', template: one, path: `/v2026-04/flows/${id}/`, headers: a.headers, body: {} }), 400, 'validation_error');
      expectError(await call({ method: 'patch', template: one, path: `/v2026-04/flows/${id}/`, headers: a.headers, raw: 'nope' }), 400, 'invalid_json');
      expectError(
        await call({ method: 'patch', template: one, path: `/v2026-04/flows/${randomUUID()}/`, headers: a.headers, body: { status: 'paused' } }),
        404,
        'not_found',
      );
      expectError(
        await call({
          method: 'patch',
          template: one,
          path: `/v2026-04/flows/${id}/`,
          headers: { ...a.headers, 'content-type': 'text/plain' },
          raw: '{"status":"paused"}',
        }),
        415,
        'unsupported_media_type',
      );
      expectError(
        await call({ method: 'patch', template: one, path: `/v2026-04/flows/${id}/`, headers: a.headers, body: { name: big(300 * 1024) } }),
        413,
        'payload_too_large',
      );

      // A matching event, re-sent until the matcher has loaded the new flow and recorded a trigger.
      const triggersPath = `/v2026-04/flows/${id}/triggers/`;
      await waitFor(
        async () => {
          const posted = await fetch(`${server.baseUrl}/v2026-04/events/`, {
            method: 'POST',
            headers: a.headers,
            body: JSON.stringify({
              name: 'Probe',
              metric: { metric_name: metric, additional_properties: { cart: { total: 11 } } },
              contact: { email: 'probe@example.com' },
            }),
          });
          expect(posted.status).toBe(202);
          const r = await fetch(`${server.baseUrl}${triggersPath}`, { headers: a.headers });
          return ((await r.json()) as Json).results?.length > 0;
        },
        { message: 'a trigger of the new flow', intervalMs: 500, timeoutMs: 30_000 },
      );
      const tr = await call({ method: 'get', template: triggers, path: triggersPath, query: { limit: '100' }, headers: a.headers, documented: true });
      expect(tr.status).toBe(200);
      expect(tr.body.results.length).toBeGreaterThan(0);
      expect(tr.body.results.every((t: Json) => t.flow_id === id)).toBe(true);
      expectError(await call({ method: 'get', template: triggers, path: triggersPath, query: { limit: 'many' }, headers: a.headers }), 400, 'validation_error');
      expectError(await call({ method: 'get', template: triggers, path: `/v2026-04/flows/${randomUUID()}/triggers/`, headers: a.headers }), 404, 'not_found');

      const del = await call({ method: 'delete', template: one, path: `/v2026-04/flows/${other.body.id}/`, headers: a.headers, documented: true });
      expect(del.status).toBe(204);
      expectError(await call({ method: 'delete', template: one, path: `/v2026-04/flows/${other.body.id}/`, headers: a.headers }), 404, 'not_found');
      expectError(await call({ method: 'get', template: one, path: `/v2026-04/flows/${other.body.id}/`, headers: a.headers }), 404, 'not_found');
    });
  });

  describe('data privacy', () => {
    it('POST a deletion job: 202, 400, 413, 415; GET it: 200 (completed), 404', async () => {
      const col = '/v2026-04/data-privacy/deletion-jobs/';
      const one = '/v2026-04/data-privacy/deletion-jobs/{id}/';
      const created = await call({
        method: 'post',
        template: col,
        headers: a.headers,
        body: { email: `nobody-${randomUUID()}@example.com` },
        documented: true,
      });
      expect(created.status).toBe(202);
      expect(created.body.status).toBe('queued');
      expect(created.headers.get('location')).toBe(`/v2026-04/data-privacy/deletion-jobs/${created.body.id}/`);
      // "Exactly one" and unknown fields are the server's to refuse (400 below), not the document's: generated
      // clients work with default options only on a document without additionalProperties: false.
      expectDocumentRejects(col, 'post', { email: 42 });
      expectError(await call({ method: 'post', template: col, headers: a.headers, body: {} }), 400, 'validation_error');
      expectError(await call({ method: 'post', template: col, headers: a.headers, body: { email: 'a@example.com', remote_id: 'r' } }), 400, 'validation_error');
      expectError(await call({ method: 'post', template: col, headers: a.headers, raw: '{' }), 400, 'invalid_json');
      expectError(
        await call({ method: 'post', template: col, headers: { ...a.headers, 'content-type': 'text/plain' }, raw: '{"email":"a@example.com"}' }),
        415,
        'unsupported_media_type',
      );
      expectError(await call({ method: 'post', template: col, headers: a.headers, body: { remote_id: big(32 * 1024) } }), 413, 'payload_too_large');
      await waitFor(
        async () =>
          (await (await fetch(`${server.baseUrl}/v2026-04/data-privacy/deletion-jobs/${created.body.id}/`, { headers: a.headers })).json()).status ===
          'completed',
        {
          message: 'the job completed',
        },
      );
      const got = await call({
        method: 'get',
        template: one,
        path: `/v2026-04/data-privacy/deletion-jobs/${created.body.id}/`,
        headers: a.headers,
        documented: true,
      });
      expect(got.body).toMatchObject({ id: created.body.id, status: 'completed', contacts_erased: 0, error: null });
      expectError(
        await call({ method: 'get', template: one, path: `/v2026-04/data-privacy/deletion-jobs/${created.body.id}/`, headers: b.headers }),
        404,
        'not_found',
      );
      expectError(await call({ method: 'get', template: one, path: '/v2026-04/data-privacy/deletion-jobs/not-an-id/', headers: a.headers }), 404, 'not_found');
    });
  });

  describe('export', () => {
    const t = '/v2026-04/conversations/export/';

    /** Conversations through the real path: records on the conversations topic, the projector's read model. */
    async function seed(
      shopId: string,
      conversations: ConversationData[],
      messages: { conversation_id: string; id: string; created_at: string; text: string }[],
    ) {
      const records: ConversationRecord[] = [
        ...conversations.map((c): ConversationRecord => ({ type: 'conversation.upserted', shop_id: shopId, conversation: c })),
        ...messages.map(({ conversation_id, ...m }): ConversationRecord => ({ type: 'message.created', shop_id: shopId, conversation_id, message: m })),
      ];
      await rt.bus.publish(
        rt.topics.conversations,
        records.map((r) => conversationsTopic.record(r)),
      );
      await waitFor(
        async () => {
          const [c] = await rt.db.query(sql`SELECT count(*)::int AS n FROM conversations WHERE shop_id = ${shopId}`);
          const [m] = await rt.db.query(sql`SELECT count(*)::int AS n FROM conversation_messages WHERE shop_id = ${shopId}`);
          return c.n === conversations.length && m.n === messages.length;
        },
        { message: 'conversations projected', timeoutMs: 30_000 },
      );
    }

    it('200 pages with the rate-limit headers, 400 (with them), 429 with Retry-After', async () => {
      const full = conversation({
        created_at: '2026-04-01T08:00:00.000Z',
        agent_id: randomUUID(),
        contact_id: randomUUID(),
        escalation_time: '2026-04-01T08:05:00.000Z',
        summary: 'Refund issued.',
        title: 'Double charge',
        flags: [{ id: randomUUID(), name: 'Needs review' }],
        tags: ['vip'],
        intent: { id: randomUUID(), name: 'Double charge' },
        topic: { id: randomUUID(), name: 'Billing' },
        resolution: 'human',
        status: 'pending',
        type: 'phone_call',
      });
      const bare = conversation({ created_at: '2026-04-02T08:00:00.000123Z', type: 'sms' });
      await seed(a.shopId, [full, bare], [{ conversation_id: full.id, id: randomUUID(), created_at: '2026-04-01T08:10:00.000Z', text: 'hello' }]);

      const first = await call({
        method: 'get',
        template: t,
        query: { limit: '1', created_at__range: '2026-03-20T00:00:00Z,2026-04-10T00:00:00Z' },
        headers: a.headers,
        documented: true,
      });
      expect(first.status).toBe(200);
      expect(first.body.results.map((c: Json) => c.id)).toEqual([full.id]);
      expect(first.body.results[0].messages.map((m: Json) => m.text)).toEqual(['hello']);
      const second = await call({
        method: 'get',
        template: t,
        query: Object.fromEntries(new URL(first.body.next).searchParams),
        headers: a.headers,
        documented: true,
      });
      expect(second.status).toBe(200);
      expect(second.body.results.map((c: Json) => c.id)).toEqual([bare.id]);
      expect(second.body.next).toBeNull();
      expect(second.body.previous).toEqual(expect.any(String));
      expect(second.headers.get('ratelimit-remaining')).toBe(String(EXPORT_LIMIT - 2));

      // The server takes uuids in any case; so must the document (zod drops a regex's `i` flag).
      const upper = await call({
        method: 'get',
        template: t,
        query: { agent_id: full.agent_id!.toUpperCase(), contact_id__in: full.contact_id!.toUpperCase() },
        headers: a.headers,
        documented: true,
      });
      expect(upper.body.results.map((c: Json) => c.id)).toEqual([full.id]);

      const badLimit = await call({ method: 'get', template: t, query: { limit: '0' }, headers: a.headers });
      expectError(badLimit, 400, 'validation_error');
      expect(badLimit.headers.get('ratelimit-remaining')).toBe(String(EXPORT_LIMIT - 4));
      expectError(await call({ method: 'get', template: t, query: { cursor: 'garbage' }, headers: a.headers }), 400, 'invalid_cursor');

      // A shop of its own: its counter starts at zero.
      const c = await createTestShop(rt);
      for (let i = 1; i <= EXPORT_LIMIT; i++) expect((await call({ method: 'get', template: t, headers: c.headers })).status, `request ${i}`).toBe(200);
      const limited = await call({ method: 'get', template: t, headers: c.headers });
      expectError(limited, 429, 'rate_limited');
      expect(limited.headers.get('retry-after')).toBe(limited.headers.get('ratelimit-reset'));
      expect(limited.headers.get('ratelimit-remaining')).toBe('0');
    });
  });
});

describe('an unexpected failure', () => {
  it('is a 500 with the error body and the request id (the flows table gone for a moment)', async () => {
    // 500 is documented on every operation and comes from the one error handler they share; one route
    // reaching it through a real database error checks that handler's answer against the document.
    await rt.db.query(sql`ALTER TABLE flows RENAME TO flows_away_for_openapi_spec`);
    try {
      expectError(await call({ method: 'get', template: '/v2026-04/flows/', headers: a.headers }), 500, 'internal_error');
    } finally {
      await rt.db.query(sql`ALTER TABLE flows_away_for_openapi_spec RENAME TO flows`);
    }
  });
});

describe('coverage', () => {
  it('reached every documented operation and every status it documents', () => {
    const documented = Object.entries<Json>(doc.paths).flatMap(([path, ops]) =>
      Object.entries<Json>(ops).map(([m, op]) => [`${m} ${path}`, Object.keys(op.responses).map(Number)] as const),
    );
    expect([...reached.keys()].sort()).toEqual(documented.map(([k]) => k).sort());
    for (const [key, statuses] of documented) {
      // 500 is reached on one operation only (above); the others share its handler.
      const unreached = [...(UNREACHED[key] ?? []), ...(key === 'get /v2026-04/flows/' ? [] : [500])];
      const expected = statuses.filter((s) => !unreached.includes(s)).sort();
      expect([...(reached.get(key) ?? [])].sort(), key).toEqual(expected);
    }
  });
});
