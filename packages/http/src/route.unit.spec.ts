import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createLogger } from '@shopstream/telemetry';
import { createBaseApp, finishApp } from './app.js';
import { ApiError } from './errors.js';
import { API_PREFIX, defineRoute, mountRoutes, uuidPathParam } from './route.js';
import { listen, type RunningServer } from './server.js';

/** One declaration, a real server: the route it registers checks what it declares, and its operation says the same. */
const logger = createLogger('route-spec', 'silent');
const ID = '0b6d5b0e-8f2a-4c1e-9d3b-2f6a7c8e9d10';
const seen: unknown[] = [];
const gone = () => new ApiError('not_found', 'No such thing.');

const routes = [
  defineRoute({
    method: 'patch',
    path: '/v2026-04/things/{id}/',
    operationId: 'updateThing',
    summary: 'Change a thing',
    tags: ['Things'],
    params: { id: uuidPathParam('The thing id.', gone) },
    query: z.object({ dry: z.enum(['yes', 'no']).optional() }),
    body: { schema: z.object({ name: z.string().min(1) }), what: 'The thing', limit: '1kb', example: { name: 'x' } },
    responses: { 200: { description: 'The thing.' } },
    errors: [400, 404, 413, 415],
    handler(_req, res, input) {
      seen.push(input);
      res.json({ id: input.params.id, name: input.body.name, dry: input.query.dry ?? null });
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v2026-04/owners/{owner_id}/things/',
    operationId: 'listOwnerThings',
    summary: "An owner's things",
    tags: ['Things'],
    params: { owner_id: uuidPathParam('The owner id.') },
    query: z.object({ limit: z.string().regex(/^\d+$/).optional() }),
    responses: { 200: { description: 'Things.' } },
    errors: [400, 404],
    handler(_req, res, { params }) {
      if (params.owner_id === null) throw gone();
      res.json({ owner: params.owner_id });
    },
  }),
];

let server: RunningServer;
let base: string;
beforeAll(async () => {
  const app = createBaseApp({ service: 'route-spec', logger, readiness: {} });
  const { router, openapi } = mountRoutes(routes);
  app.use(API_PREFIX, router);
  finishApp(app, openapi.operations);
  server = await listen(app, 0, '127.0.0.1', logger, { headersTimeoutMs: 5_000, requestTimeoutMs: 5_000, keepAliveTimeoutMs: 5_000, backlog: 511 });
  base = `http://127.0.0.1:${server.port}${API_PREFIX}`;
});
afterAll(async () => {
  await server.close(1_000);
});

const patch = (path: string, body: string, type = 'application/json') => fetch(`${base}${path}`, { method: 'PATCH', headers: { 'content-type': type }, body });
const codeOf = async (r: Response) => ((await r.json()) as { error: { code: string; fields: Record<string, unknown> } }).error;

describe('defineRoute', () => {
  it('yields the OpenAPI operation of what it declares: path parameters, query, body and example', () => {
    const [op, list] = routes.map((r) => r.operation);
    expect(op).toMatchObject({
      method: 'patch',
      path: '/v2026-04/things/{id}/',
      operationId: 'updateThing',
      bodyExample: { name: 'x' },
      errors: [400, 404, 413, 415],
    });
    expect(op.params).toEqual([{ name: 'id', in: 'path', schema: expect.any(z.ZodType), description: 'The thing id.' }]);
    expect(Object.keys(op.query!.shape)).toEqual(['dry']);
    expect(routes.map((r) => r.expressPath)).toEqual(['/things/:id/', '/owners/:owner_id/things/']);
    expect(list.body).toBeUndefined();
  });

  it('refuses a declaration whose parameters are not those of its path, or one outside the version prefix', () => {
    const base = { method: 'get' as const, operationId: 'x', summary: 'x', tags: [], responses: {}, errors: [], handler: () => undefined };
    expect(() => defineRoute({ ...base, path: '/v2026-04/things/{id}/' })).toThrow(/declares the parameters none/);
    expect(() => defineRoute({ ...base, path: '/things/' })).toThrow(/not under/);
  });

  it('answers with the validated, lowercased input', async () => {
    const r = await patch(`/things/${ID.toUpperCase()}/?dry=yes`, JSON.stringify({ name: 'new' }));
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ id: ID, name: 'new', dry: 'yes' });
  });

  it('checks in order: content type and size, path parameter, query, body', async () => {
    expect((await codeOf(await patch('/things/nope/?dry=maybe', '{', 'text/plain'))).code).toBe('unsupported_media_type');
    expect((await codeOf(await patch('/things/nope/?dry=maybe', JSON.stringify({ name: 'x'.repeat(2_000) })))).code).toBe('payload_too_large');
    expect((await codeOf(await patch('/things/nope/?dry=maybe', JSON.stringify({ name: '' })))).code).toBe('not_found');
    const query = await codeOf(await patch(`/things/${ID}/?dry=maybe`, JSON.stringify({ name: '' })));
    expect(query.code).toBe('validation_error');
    expect(Object.keys(query.fields)).toEqual(['dry']);
    const body = await codeOf(await patch(`/things/${ID}/`, JSON.stringify({ name: '' })));
    expect(body).toMatchObject({ code: 'validation_error', message: 'The thing is not valid.' });
    expect(Object.keys(body.fields)).toEqual(['name']);
  });

  it('hands a parameter without orElse to the handler as null, after the query is checked', async () => {
    expect((await codeOf(await fetch(`${base}/owners/nope/things/?limit=x`))).code).toBe('validation_error');
    expect((await codeOf(await fetch(`${base}/owners/nope/things/`))).code).toBe('not_found');
    expect(await (await fetch(`${base}/owners/${ID}/things/`)).json()).toEqual({ owner: ID });
  });

  it('mounts only the declared methods: another one is a 405 with Allow', async () => {
    const r = await fetch(`${base}/things/${ID}/`, { method: 'DELETE' });
    expect(r.status).toBe(405);
    expect(r.headers.get('allow')).toBe('PATCH');
  });
});
