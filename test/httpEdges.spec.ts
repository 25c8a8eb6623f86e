import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startQueryApi } from '@shopstream/query-api';
import { startActivityProjector } from '@shopstream/activity-projector';
import { createTestShop, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';
import { problemsOf, rawEdgeCases, sendRaw } from '@shopstream/testkit/badInput';

let rt: Runtime;
let server: TestServer;
let shop: Awaited<ReturnType<typeof createTestShop>>;

beforeAll(async () => {
  rt = await startTestRuntime({ CONSUMER_GROUP_PREFIX: `http-edges-${Date.now()}.` }, 'http-edges-spec');
  server = await startTestServer(rt, [await startActivityProjector(rt), await startIngestApi(rt), await startQueryApi(rt)]);
  shop = await createTestShop(rt);
});
afterAll(async () => {
  await server?.stop();
});

// 30 s for an answer: a good event waits for its publish, which a loaded machine can hold for seconds.
const raw = (request: string) => sendRaw(server.baseUrl, request, 30_000);

const envelope = (r: { headers: Record<string, string>; body: string }) => {
  const body = JSON.parse(r.body);
  expect(body.error.request_id).toBe(r.headers['x-request-id']);
  expect(r.headers['x-request-id']).toMatch(/\S/);
  return body.error as { code: string; message: string; fields: Record<string, unknown> };
};
const event = JSON.stringify({ name: 'Placed Order', metric: { metric_name: 'placed_order' } });
const post = (auth: string, body = event) =>
  `POST /v2026-04/events/ HTTP/1.1\r\nHost: x\r\nX-Shop-Id: ${shop.shopId}\r\nContent-Type: application/json\r\n${auth}Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;

describe('what the HTTP layer refuses is answered in the error body with a request id', () => {
  it('two Authorization headers: answered (the first counts, as Node keeps it), never left without an answer', async () => {
    const good = `Authorization: Bearer ${shop.key}\r\n`;
    const bad = `Authorization: Bearer ssk_not_a_key\r\n`;
    expect((await raw(post(good + good))).status).toBe(202);
    const badFirst = await raw(post(bad + good));
    expect(badFirst.status).toBe(401);
    expect(envelope(badFirst).code).toBe('unauthorized');
    expect((await raw(post(good + bad))).status).toBe(202);
    const malformed = await raw(post(`Authorization: Basic abc\r\n${good}`));
    expect(malformed.status).toBe(401);
    expect(envelope(malformed).fields).toEqual({ authorization: 'Missing or malformed.' });
  });

  it('a known path with a method it lacks is a 405 with Allow (HEAD /v2026-04/events/ was a 404)', async () => {
    const head = await raw(
      `HEAD /v2026-04/events/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${shop.key}\r\nX-Shop-Id: ${shop.shopId}\r\nConnection: close\r\n\r\n`,
    );
    expect(head.status).toBe(405);
    expect(head.headers.allow).toBe('POST');
    expect(head.headers['x-request-id']).toMatch(/\S/);
    expect(head.body).toBe('');
    const get = await fetch(`${server.baseUrl}/v2026-04/events/bulk/`, { headers: shop.headers });
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    expect(((await get.json()) as any).error).toMatchObject({ code: 'method_not_allowed', request_id: get.headers.get('x-request-id') });
    const del = await fetch(`${server.baseUrl}/v2026-04/conversations/export/`, { method: 'DELETE', headers: shop.headers });
    expect(del.status).toBe(405);
    expect(del.headers.get('allow')).toBe('GET, HEAD');
    // An unknown path stays a 404.
    expect((await fetch(`${server.baseUrl}/v2026-04/nothing/`, { headers: shop.headers })).status).toBe(404);
  });

  it('a 10,000-id id__in URL, an oversized header and a malformed request line: 431 and 400 in the envelope', async () => {
    const ids = Array.from({ length: 10_000 }, () => '00000000-0000-4000-8000-000000000000').join(',');
    const long = await raw(`GET /v2026-04/conversations/export/?id__in=${ids} HTTP/1.1\r\nHost: x\r\n\r\n`);
    expect(long.status).toBe(431);
    expect(envelope(long).code).toBe('headers_too_large');
    const garbage = await raw('BLAH\r\n\r\n');
    expect(garbage.status).toBe(400);
    expect(envelope(garbage).code).toBe('bad_request');
  });
});

describe('requests only raw bytes can send (shared with the bad-input fault scenario)', () => {
  it('each is answered, never a 5xx, a failure in the error envelope with its request id', async () => {
    const answers: Record<string, number> = {};
    for (const c of rawEdgeCases(shop)) {
      const res = await raw(c.request).catch((e: Error) => ({ status: 0, headers: {}, body: '', text: `no answer: ${e.message}` }));
      answers[c.name] = res.status;
      expect(res.status, `${c.name}: ${res.text.slice(0, 300)}`).toBeGreaterThan(0);
      expect(
        problemsOf({ method: c.method, path: '', headers: {}, operation: '', tags: [] }, res).map((p) => p.message),
        c.name,
      ).toEqual([]);
    }
    expect(answers['two Authorization headers, the first bad']).toBe(401);
    expect(answers['chunked and a Content-Length']).toBe(400);
    expect(answers['a good chunked body']).toBe(202);
  });
});

describe('deep nesting anywhere in a body is a 400, never a 500', () => {
  const nested = (n: number) => '['.repeat(n) + '1' + ']'.repeat(n);
  it.each([5_000, 100_000])('%i levels: in an event, a bulk item, a flow condition value, a flow patch, and as the whole body', async (n) => {
    const bodies: [string, string, string][] = [
      ['POST', '/v2026-04/events/', `{"name":"n","metric":{"metric_name":"m","additional_properties":{"x":${nested(n)}}}}`],
      ['POST', '/v2026-04/events/', nested(n)],
      ['POST', '/v2026-04/events/bulk/', `{"events":[{"name":"n","metric":{"metric_name":"m","additional_properties":{"x":${nested(n)}}}}]}`],
      ['POST', '/v2026-04/flows/', `{"name":"f","trigger":{"metric_name":"m","property_conditions":[{"field":"a","op":"eq","value":${nested(n)}}]}}`],
      [
        'PATCH',
        '/v2026-04/flows/00000000-0000-4000-8000-000000000000/',
        `{"trigger":{"metric_name":"m","property_conditions":[{"field":"a","op":"eq","value":${nested(n)}}]}}`,
      ],
    ];
    for (const [method, path, body] of bodies) {
      const res = await fetch(`${server.baseUrl}${path}`, { method, headers: shop.headers, body });
      const text = await res.text();
      if (path.endsWith('/bulk/')) {
        // Bulk reports the item, as it does any invalid item.
        expect(res.status).toBe(200);
        expect(JSON.parse(text).results[0].error.fields).toEqual({ 'metric.additional_properties': 'Nested at most 16 levels deep.' });
        continue;
      }
      expect(res.status, `${method} ${path}: ${text.slice(0, 300)}`).toBeGreaterThanOrEqual(400);
      expect(res.status, `${method} ${path}: ${text.slice(0, 300)}`).toBeLessThan(500);
      expect(JSON.parse(text).error.request_id).toBe(res.headers.get('x-request-id'));
    }
  });
});

describe('times at the edges of what is stored are read back as they were accepted, in RFC 3339', () => {
  it('the first and last instants accepted round-trip through the projection; one past either side is a 400', async () => {
    const cases: [string, string][] = [
      ['0001-01-01T00:00:00Z', '0001-01-01T00:00:00.000Z'],
      ['0001-01-01T14:00:00+14:00', '0001-01-01T00:00:00.000Z'],
      ['9999-12-31T23:59:59.999Z', '9999-12-31T23:59:59.999Z'],
      ['9999-12-31T09:59:59-14:00', '9999-12-31T23:59:59.000Z'],
      ['2026-04-01T10:00:00+15:59', '2026-03-31T18:01:00.000Z'],
    ];
    for (const [sent, readBack] of cases) {
      const res = await fetch(`${server.baseUrl}/v2026-04/events/`, {
        method: 'POST',
        headers: shop.headers,
        body: JSON.stringify({ name: 'Edge', metric: { metric_name: 'edge' }, event_time: sent }),
      });
      expect(res.status, sent).toBe(202);
      const id = ((await res.json()) as any).activity_id as string;
      const activity = await waitFor(
        async () => {
          const r = await fetch(`${server.baseUrl}/v2026-04/activities/${id}/`, { headers: shop.headers });
          return r.status === 200 ? ((await r.json()) as any) : null;
        },
        { message: `activity for ${sent}` },
      );
      expect(activity.event_time, sent).toBe(readBack);
    }
    for (const bad of ['0001-01-01T00:00:00+14:00', '9999-12-31T23:59:59-14:00', '2026-04-01T10:00:00+16:00', '2026-04-01T10:00:00-23:59']) {
      const res = await fetch(`${server.baseUrl}/v2026-04/events/`, {
        method: 'POST',
        headers: shop.headers,
        body: JSON.stringify({ name: 'Edge', metric: { metric_name: 'edge' }, event_time: bad }),
      });
      expect(res.status, bad).toBe(400);
      expect(((await res.json()) as any).error.fields).toHaveProperty('event_time');
    }
  });
});
