import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKafkaBus, type BusRecord } from '@shopstream/bus';
import { sql } from '@shopstream/db';
import { parseBootstrapKeys } from '@shopstream/http';
import { storedEventRecordSchema } from '@shopstream/contracts';
import {
  createTestShop,
  giveUpDuringContactLookup,
  json,
  metricSum as harnessMetricSum,
  readTopic,
  startTestRuntime,
  startTestServer,
  waitFor,
  type TestServer,
} from '@shopstream/harness';
import type { Runtime } from '@shopstream/runtime';
import { eventRecordOf } from '@shopstream/testkit';
import { KeyCache, openEventRecords, openKeyring } from '@shopstream/privacy';
import { activityId, activityKey } from '@shopstream/records';
import { spawnBodyWorker } from './bodyPool.js';
import { ingestApiService, startIngestApi } from './index.js';
import { ingestApi } from './ingestApi.js';

let rt: Runtime;
let server: TestServer;

beforeAll(async () => {
  // A short key cache, so a revoked key is refused within the test's patience.
  rt = await startTestRuntime({ API_KEY_CACHE_TTL_MS: '200' }, 'ingest-routes');
  server = await startTestServer(rt, [await startIngestApi(rt)]);
});

afterAll(async () => {
  await server?.stop();
});

interface Answer {
  status: number;
  headers: Headers;
  body: any;
}

async function post(path: string, body: unknown, headers: Record<string, string>, raw = false, base = server.baseUrl): Promise<Answer> {
  const res = await fetch(`${base}/v2026-04${path}`, { method: 'POST', headers, body: raw ? (body as string) : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
}

const event = (over: Record<string, unknown> = {}) => ({ name: 'Placed Order', metric: { metric_name: 'placed_order', value: 42.5 }, ...over });

/** The error body, with the request id the response header carries. */
function expectError(a: Answer, status: number, code: string, fields: Record<string, unknown>) {
  expect(a.status).toBe(status);
  expect(a.body).toEqual({ error: { code, message: expect.any(String), request_id: a.headers.get('x-request-id'), fields } });
}

/**
 * The shop's records on `events`, read until `until` holds. A consumer may be handed a record again
 * (at-least-once, e.g. around a rebalance), so records are told apart by partition and offset.
 */
async function shopRecords(shopId: string, until: (mine: BusRecord[]) => boolean): Promise<BusRecord[]> {
  const mine = (rs: BusRecord[]) => {
    const seen = new Map<string, BusRecord>();
    for (const r of rs) if (r.key === shopId) seen.set(`${r.partition}:${r.offset}`, r);
    return [...seen.values()].sort((a, b) => (BigInt(a.offset) < BigInt(b.offset) ? -1 : 1));
  };
  const records = mine(await readTopic(rt, rt.topics.events, (rs) => until(mine(rs))));
  // Every record ingest writes must pass the contract its consumers validate with.
  for (const r of records) expect(storedEventRecordSchema.safeParse(json(r)).error).toBeUndefined();
  return records;
}

describe('errors of the event endpoints', () => {
  it('401 unauthorized without a key, with an unknown key, with a malformed header', async () => {
    const shop = await createTestShop(rt);
    const { authorization: _a, ...noKey } = shop.headers;
    expectError(await post('/events/', event(), noKey), 401, 'unauthorized', { authorization: 'Missing or malformed.' });
    expectError(await post('/events/', event(), { ...noKey, authorization: 'Basic abc' }), 401, 'unauthorized', { authorization: 'Missing or malformed.' });
    expectError(await post('/events/bulk/', { events: [event()] }, { ...noKey, authorization: 'Bearer ssk_nope' }), 401, 'unauthorized', {
      authorization: 'Unknown or revoked key.',
    });
  });

  it('401 unauthorized once a key is revoked (after the key cache expires)', async () => {
    const shopId = randomUUID();
    const { id, secret } = await rt.apiKeys.create([shopId], 'to revoke');
    const headers = { authorization: `Bearer ${secret}`, 'x-shop-id': shopId, 'content-type': 'application/json' };
    expect((await post('/events/', event(), headers)).status).toBe(202);
    expect(await rt.apiKeys.revoke(id)).toBe(true);
    const refused = await waitFor(
      async () => {
        const a = await post('/events/', event(), headers);
        return a.status === 401 ? a : undefined;
      },
      { timeoutMs: 60_000, message: 'revoked key refused' },
    );
    expectError(refused, 401, 'unauthorized', { authorization: 'Unknown or revoked key.' });
    // Creating it again, as BOOTSTRAP_API_KEYS does at every start, does not bring it back.
    await rt.apiKeys.create([shopId], 'to revoke', secret);
    await new Promise((r) => setTimeout(r, 400)); // past the 200 ms key cache
    expect((await post('/events/', event(), headers)).status).toBe(401);
  });

  it('a contact the database refuses fails its own request only, not the requests that shared its look-up', async () => {
    const shop = await createTestShop(rt);
    // A constraint of this test's database stands for any refusal validation did not foresee.
    await rt.db.query(sql`ALTER TABLE contacts ADD CONSTRAINT event_routes_spec_poison CHECK (email IS NULL OR email <> 'poison@example.com')`);
    try {
      const emails = ['poison@example.com', ...Array.from({ length: 9 }, () => `${randomUUID()}@example.com`)];
      // Concurrent: their look-ups are gathered into one resolution (INGEST_LINGER_MS).
      const answers = await Promise.all(emails.map((email) => post('/events/', event({ contact: { email } }), shop.headers)));
      expect(answers.map((a) => a.status)).toEqual([500, ...emails.slice(1).map(() => 202)]);
    } finally {
      await rt.db.query(sql`ALTER TABLE contacts DROP CONSTRAINT event_routes_spec_poison`);
    }
  });

  it('400 invalid_shop when X-Shop-Id is missing or not a uuid', async () => {
    const shop = await createTestShop(rt);
    const { 'x-shop-id': _s, ...noShop } = shop.headers;
    expectError(await post('/events/', event(), noShop), 400, 'invalid_shop', { 'x-shop-id': 'Required.' });
    expectError(await post('/events/bulk/', { events: [event()] }, { ...noShop, 'x-shop-id': 'shop-1' }), 400, 'invalid_shop', {
      'x-shop-id': 'Must be a uuid.',
    });
    // Hex in uuid form but no RFC 9562 variant: the records' schema would refuse it, so the door does too
    // (it was accepted, 202, and every event dead-lettered).
    const notRfc = '33333333-3333-3333-3333-333333333333';
    const key = await rt.apiKeys.create([randomUUID()], 'not-rfc');
    expectError(await post('/events/', event(), { ...noShop, authorization: `Bearer ${key.secret}`, 'x-shop-id': notRfc }), 400, 'invalid_shop', {
      'x-shop-id': 'Must be a uuid.',
    });
    expect(() => parseBootstrapKeys(`k=${notRfc}`)).toThrow(/not a uuid/);
  });

  it('403 forbidden for a key of shop A on shop B', async () => {
    const a = await createTestShop(rt);
    const b = await createTestShop(rt);
    expectError(await post('/events/', event(), { ...a.headers, 'x-shop-id': b.shopId }), 403, 'forbidden', { 'x-shop-id': 'Not granted to this key.' });
    expectError(await post('/events/bulk/', { events: [event()] }, { ...a.headers, 'x-shop-id': b.shopId }), 403, 'forbidden', {
      'x-shop-id': 'Not granted to this key.',
    });
  });

  it('415 unsupported_media_type for a body that is not application/json', async () => {
    const { headers } = await createTestShop(rt);
    for (const path of ['/events/', '/events/bulk/']) {
      expectError(await post(path, JSON.stringify(event()), { ...headers, 'content-type': 'text/plain' }, true), 415, 'unsupported_media_type', {
        'content-type': 'Must be application/json.',
      });
    }
  });

  it('400 invalid_json for a body that does not parse', async () => {
    const { headers } = await createTestShop(rt);
    expectError(await post('/events/', '{"name": "x", "metric": ', headers, true), 400, 'invalid_json', {});
    expectError(await post('/events/bulk/', '{"events": [}', headers, true), 400, 'invalid_json', {});
    // A body that cannot be read (claims gzip, is not): the client's fault, a 400, not a 500.
    const notGzip = await post('/events/', JSON.stringify(event()), { ...headers, 'content-encoding': 'gzip' }, true);
    expect(notGzip.status).toBe(400);
    expect(notGzip.body.error.code).toBe('invalid_json');
    // A contact email longer than an address can be (the index would refuse it): a 400 on that field.
    expectError(await post('/events/', event({ contact: { email: `${'a'.repeat(6000)}@example.com` } }), headers), 400, 'validation_error', {
      'contact.email': expect.any(String),
    });
  });

  it('400 validation_error for additional_properties nested 5,000 or 100,000 levels deep (it was a stack overflow: a 500)', async () => {
    const shop = await createTestShop(rt);
    for (const levels of [5_000, 100_000]) {
      const body = `{"name": "n", "metric": {"metric_name": "m", "additional_properties": {"a": ${'['.repeat(levels)}${']'.repeat(levels)}}}}`;
      const a = await post('/events/', body, { ...shop.headers, 'content-type': 'application/json' }, true);
      expectError(a, 400, 'validation_error', { 'metric.additional_properties': 'Nested at most 16 levels deep.' });
    }
  });

  it('400 validation_error naming the path of an integer beyond ±2^53 (it was accepted and rounded: 12345678901234567890 -> 12345678901234567000)', async () => {
    const shop = await createTestShop(rt);
    const headers = { ...shop.headers, 'content-type': 'application/json' };
    const single = await post(
      '/events/',
      '{"name":"n","metric":{"metric_name":"m","additional_properties":{"order":{"id":12345678901234567890}}}}',
      headers,
      true,
    );
    expectError(single, 400, 'validation_error', { 'metric.additional_properties.order.id': expect.stringContaining('send it as a string') });
    const value = await post('/events/', '{"name":"n","metric":{"metric_name":"m","value":-12345678901234567890}}', headers, true);
    expectError(value, 400, 'validation_error', { 'metric.value': expect.stringContaining('cannot be kept exactly') });
    // In bulk, the item fails alone; the exact integer beside it is taken.
    const bulk = await post(
      '/events/bulk/',
      '{"events":[{"name":"n","metric":{"metric_name":"m","additional_properties":{"ids":[1,12345678901234567890]}}},{"name":"n","metric":{"metric_name":"m","additional_properties":{"id":9007199254740991}}}]}',
      headers,
      true,
    );
    expect(bulk.status).toBe(200);
    expect(bulk.body.results[0].error.fields).toEqual({ 'metric.additional_properties.ids.1': expect.stringContaining('send it as a string') });
    expect(bulk.body.results[1].status).toBe('success');
  });

  it('431 headers_too_large in the error body, with a request id, for headers or a URL past 16 KiB (it was a bare 431 with no body)', async () => {
    const shop = await createTestShop(rt);
    const big = await fetch(`${server.baseUrl}/v2026-04/events/`, {
      method: 'POST',
      headers: { ...shop.headers, 'content-type': 'application/json', 'x-big': 'a'.repeat(20_000) },
      body: '{}',
    });
    const body = (await big.json()) as any;
    expect(big.status).toBe(431);
    expect(body).toEqual({
      error: { code: 'headers_too_large', message: expect.stringContaining('16384 bytes'), request_id: big.headers.get('x-request-id'), fields: {} },
    });
    const ids = Array.from({ length: 1_000 }, () => randomUUID()).join(',');
    const long = await fetch(`${server.baseUrl}/v2026-04/events/?id__in=${ids}`, {
      method: 'POST',
      headers: { ...shop.headers, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(long.status).toBe(431);
    expect(((await long.json()) as any).error.code).toBe('headers_too_large');
    // The server still answers after refusing.
    expect((await post('/events/', event(), { ...shop.headers, 'content-type': 'application/json' })).status).toBe(202);
  });

  it('413 payload_too_large above 1 MiB (single) and 10 MiB (bulk); just under the bulk limit is taken', async () => {
    const { headers } = await createTestShop(rt);
    const padded = (bytes: number) => {
      const base = JSON.stringify(event({ description: '' }));
      return base.replace('"description":""', `"description":"${'x'.repeat(bytes - base.length)}"`);
    };
    const single = padded(1024 * 1024 + 1);
    expect(Buffer.byteLength(single)).toBe(1024 * 1024 + 1);
    expectError(await post('/events/', single, headers, true), 413, 'payload_too_large', {});

    const bulkOf = (bytes: number) => {
      const base = JSON.stringify({ events: [event()], pad: '' });
      return base.replace('"pad":""', `"pad":"${'x'.repeat(bytes - base.length)}"`);
    };
    expectError(await post('/events/bulk/', bulkOf(10 * 1024 * 1024 + 1), headers, true), 413, 'payload_too_large', {});
    // Exactly 10 MiB passes the limit and reaches validation (the padding is an unknown field).
    expectError(await post('/events/bulk/', bulkOf(10 * 1024 * 1024), headers, true), 400, 'validation_error', { pad: 'Unknown field.' });
  });

  it('400 validation_error with the field paths of each problem (single)', async () => {
    const { headers } = await createTestShop(rt);
    const cases: [unknown, Record<string, string>][] = [
      [event({ colour: 'red' }), { colour: 'Unknown field.' }],
      [event({ metric: { metric_name: 'a', foo: 1 } }), { 'metric.foo': 'Unknown field.' }],
      [{ metric: { metric_name: 'a' } }, { name: 'Required.' }],
      [{ name: 'x' }, { metric: 'Required.' }],
      [event({ name: '   ' }), { name: 'Required, not empty.' }],
      [event({ metric: { metric_name: '' } }), { 'metric.metric_name': 'Required, not empty.' }],
      [event({ metric: { metric_name: 'a', value: '3' } }), { 'metric.value': 'Must be a finite number.' }],
      [event({ metric: { metric_name: 'a', context_object_id: 'nope' } }), { 'metric.context_object_id': 'Invalid UUID' }],
      [
        event({ contact: { phone: '12345' } }),
        { 'contact.phone': 'Not a valid phone number. Give it in international format with the country code, e.g. +14155552671.' },
      ],
      [event({ contact: { name: 'Ann' } }), { contact: 'Give at least one of email, phone, remote_id.' }],
      [event({ contact: { email: 'not-an-email' } }), { 'contact.email': 'Invalid email address' }],
      [event({ event_time: '2026-04-01T10:00:00' }), { event_time: 'Invalid ISO datetime' }],
      [[event()], { '(body)': 'Invalid input: expected object, received array' }],
    ];
    for (const [body, fields] of cases) expectError(await post('/events/', body, headers), 400, 'validation_error', fields);
    // JSON has no Infinity, but 1e400 parses to it.
    expectError(await post('/events/', '{"name":"x","metric":{"metric_name":"a","value":1e400}}', headers, true), 400, 'validation_error', {
      'metric.value': 'Must be a finite number.',
    });
  });

  it('400 validation_error for a bulk body that is not {events: [1..100 items]}', async () => {
    const { headers } = await createTestShop(rt);
    const cases: [unknown, Record<string, string>][] = [
      [{ events: [] }, { events: 'Give 1 to 100 events.' }],
      [{ events: Array.from({ length: 101 }, () => event()) }, { events: 'Give 1 to 100 events.' }],
      [[event()], { '(body)': 'Invalid input: expected object, received array' }],
      ['events', { '(body)': 'Invalid input: expected object, received string' }],
      [{}, { events: 'Required.' }],
      [{ events: event() }, { events: 'Invalid input: expected array, received object' }],
      [{ events: [event()], dry_run: true }, { dry_run: 'Unknown field.' }],
    ];
    for (const [body, fields] of cases) expectError(await post('/events/bulk/', body, headers), 400, 'validation_error', fields);
  });

  it('a request that fails validation writes nothing to the log', async () => {
    const shop = await createTestShop(rt);
    expect((await post('/events/', event({ name: '' }), shop.headers)).status).toBe(400);
    expect((await post('/events/bulk/', { events: [] }, shop.headers)).status).toBe(400);
    // Records of one shop share a partition, in order: once the marker is read, anything before it was too.
    const marker = await post('/events/', event({ name: 'marker' }), shop.headers);
    const mine = await shopRecords(shop.shopId, (rs) => rs.some((r) => json(r).activity_id === marker.body.activity_id));
    expect(mine.map((r) => json(r).name)).toEqual(['marker']);
  });
});

describe('recording', () => {
  it('single: 202 {activity_id}; the record on `events` carries the event, keyed and labelled by shop', async () => {
    const shop = await createTestShop(rt);
    const before = Date.now();
    const a = await post('/events/', event({ description: 'Order #1' }), shop.headers);
    expect(a.status).toBe(202);
    expect(a.body).toEqual({ activity_id: expect.stringMatching(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/) });
    const [r] = await shopRecords(shop.shopId, (rs) => rs.length >= 1);
    expect(r.key).toBe(shop.shopId);
    expect(r.headers).toEqual({ 'content-type': 'application/json', schema: 'event-recorded.v2', shop_id: shop.shopId });
    const v = json(r);
    // Nothing optional given, nothing optional set.
    expect(v).toEqual(
      eventRecordOf({
        activity_id: a.body.activity_id,
        shop_id: shop.shopId,
        name: 'Placed Order',
        description: 'Order #1',
        event_time: v.received_at,
        received_at: expect.any(String),
        metric: { metric_name: 'placed_order', value: 42.5 },
        request_id: a.headers.get('x-request-id')!,
      }),
    );
    // event_time defaults to the arrival of the request.
    expect(Date.parse(v.received_at)).toBeGreaterThanOrEqual(before - 1);
    expect(Date.parse(v.received_at)).toBeLessThanOrEqual(Date.now());
  });

  it('bulk: valid items are written in order, invalid ones answer with their index and error', async () => {
    const shop = await createTestShop(rt);
    const ctx = randomUUID();
    const events = [
      event({ event_time: '2026-04-01T10:00:00+02:00', remote_id: 'ord-1', remote_platform: 'shopify', contact: { email: ' Ann@Example.COM ', name: 'Ann' } }),
      { metric: { metric_name: 'x' } },
      event({
        metric: {
          metric_name: 'viewed',
          additional_properties: { sku: 'A-1', tags: ['x'] },
          context_object_id: ctx,
          context_object_type: 'product',
          deduping_key: 'v-1',
        },
      }),
      event({ contact: { phone: '555' } }),
    ];
    const a = await post('/events/bulk/', { events }, shop.headers);
    expect(a.status).toBe(200);
    const requestId = a.headers.get('x-request-id');
    const contactId = a.body.results[0].event?.contact?.id;
    expect(a.body).toEqual({
      results: [
        {
          index: 0,
          status: 'success',
          event: {
            activity_id: activityId(shop.shopId, activityKey({ remote_id: 'ord-1', remote_platform: 'shopify', metric: { metric_name: 'placed_order' } })),
            contact: { id: contactId, email: 'ann@example.com' },
          },
        },
        {
          index: 1,
          status: 'error',
          error: { code: 'validation_error', message: 'The event is not valid.', request_id: requestId, fields: { name: 'Required.' } },
        },
        { index: 2, status: 'success', event: { activity_id: activityId(shop.shopId, JSON.stringify(['dedupe', 'viewed', 'v-1'])) } },
        {
          index: 3,
          status: 'error',
          error: {
            code: 'validation_error',
            message: 'The event is not valid.',
            request_id: requestId,
            fields: { 'contact.phone': 'Not a valid phone number. Give it in international format with the country code, e.g. +14155552671.' },
          },
        },
      ],
    });
    const mine = await shopRecords(shop.shopId, (rs) => rs.length >= 2);
    expect(mine).toHaveLength(2);
    for (const r of mine) expect(r.headers).toEqual({ 'content-type': 'application/json', schema: 'event-recorded.v2', shop_id: shop.shopId });
    const [first, second] = mine.map(json);
    expect(first).toMatchObject({
      activity_id: a.body.results[0].event.activity_id,
      activity_key: JSON.stringify(['remote', 'shopify', 'ord-1']),
      event_time: '2026-04-01T10:00:00+02:00',
      remote_id: 'ord-1',
      remote_platform: 'shopify',
      // The contact's identifiers and name, the event's name and properties: sealed under the contact's key (docs/privacy.md).
      contact: { id: contactId },
      sealed: { alg: 'A256GCM', key_id: expect.any(String) },
      request_id: requestId,
    });
    expect(first.name).toBeUndefined();
    expect(JSON.stringify(first)).not.toMatch(/ann@example\.com|"Ann"|Placed Order/);
    expect(second).toMatchObject({
      activity_id: a.body.results[2].event.activity_id,
      activity_key: JSON.stringify(['dedupe', 'viewed', 'v-1']),
      event_time: second.received_at,
      contact: null,
      metric: {
        metric_name: 'viewed',
        value: null,
        additional_properties: { sku: 'A-1', tags: ['x'] },
        context_object_id: ctx,
        context_object_type: 'product',
        metric_object_id: null,
        metric_object_type: null,
        deduping_key: 'v-1',
      },
    });
  });
});

describe('replays', () => {
  it('the same remote_id twice: one activity id; again within one bulk request: one record', async () => {
    const shop = await createTestShop(rt);
    const keyed = event({ remote_id: 'r-1' });
    const one = await post('/events/', keyed, shop.headers);
    const two = await post('/events/', { ...keyed, name: 'Changed name' }, shop.headers);
    const expected = activityId(shop.shopId, JSON.stringify(['remote', '', 'r-1']));
    expect([one.status, two.status]).toEqual([202, 202]);
    expect([one.body, two.body]).toEqual([{ activity_id: expected }, { activity_id: expected }]);
    // A different platform is another key.
    const other = await post('/events/', event({ remote_id: 'r-1', remote_platform: 'shopify' }), shop.headers);
    expect(other.body.activity_id).not.toBe(expected);
    expect(other.body.activity_id).toBe(activityId(shop.shopId, JSON.stringify(['remote', 'shopify', 'r-1'])));

    const bulk = await post(
      '/events/bulk/',
      { events: [event({ remote_id: 'b-1', name: 'first' }), event({ remote_id: 'b-1', name: 'second' }), event({ name: 'after' })] },
      shop.headers,
    );
    const b1 = activityId(shop.shopId, JSON.stringify(['remote', '', 'b-1']));
    expect(bulk.body.results.map((r: any) => [r.status, r.event.activity_id])).toEqual([
      ['success', b1],
      ['success', b1],
      ['success', bulk.body.results[2].event.activity_id],
    ]);
    const mine = await shopRecords(shop.shopId, (rs) => rs.some((r) => json(r).name === 'after'));
    // Across requests each one is written (the projector keeps the first); within one request, only the first.
    expect(mine.map((r) => [json(r).activity_id, json(r).name])).toEqual([
      [expected, 'Placed Order'],
      [expected, 'Changed name'],
      [other.body.activity_id, 'Placed Order'],
      [b1, 'first'],
      [bulk.body.results[2].event.activity_id, 'after'],
    ]);
  });

  it('the same deduping_key and metric_name: one activity id and one record per request; another metric_name is another activity', async () => {
    const shop = await createTestShop(rt);
    const d = (metric_name: string, name: string) => event({ name, metric: { metric_name, deduping_key: 'k-1' } });
    const bulk = await post('/events/bulk/', { events: [d('clicked', 'a'), d('clicked', 'b'), d('opened', 'c')] }, shop.headers);
    const clicked = activityId(shop.shopId, JSON.stringify(['dedupe', 'clicked', 'k-1']));
    const opened = activityId(shop.shopId, JSON.stringify(['dedupe', 'opened', 'k-1']));
    expect(bulk.body.results.map((r: any) => r.event.activity_id)).toEqual([clicked, clicked, opened]);
    const single = await post('/events/', d('clicked', 'd'), shop.headers);
    expect(single.body).toEqual({ activity_id: clicked });
    const mine = await shopRecords(shop.shopId, (rs) => rs.some((r) => json(r).name === 'd'));
    expect(mine.map((r) => [json(r).activity_id, json(r).name])).toEqual([
      [clicked, 'a'],
      [opened, 'c'],
      [clicked, 'd'],
    ]);
  });

  it('remote_id wins over deduping_key as the key', async () => {
    const shop = await createTestShop(rt);
    const a = await post('/events/', event({ remote_id: 'x', metric: { metric_name: 'm', deduping_key: 'k' } }), shop.headers);
    expect(a.body.activity_id).toBe(activityId(shop.shopId, JSON.stringify(['remote', '', 'x'])));
  });

  it('two unkeyed events get two ids', async () => {
    const shop = await createTestShop(rt);
    const a = await post('/events/', event(), shop.headers);
    const b = await post('/events/', event(), shop.headers);
    expect(a.body.activity_id).not.toBe(b.body.activity_id);
    const bulk = await post('/events/bulk/', { events: [event(), event()] }, shop.headers);
    const [x, y] = bulk.body.results.map((r: any) => r.event.activity_id);
    expect(new Set([a.body.activity_id, b.body.activity_id, x, y]).size).toBe(4);
  });

  it('the same key in another shop is another activity', async () => {
    const s1 = await createTestShop(rt);
    const s2 = await createTestShop(rt);
    const a = await post('/events/', event({ remote_id: 'same' }), s1.headers);
    const b = await post('/events/', event({ remote_id: 'same' }), s2.headers);
    expect(a.body.activity_id).not.toBe(b.body.activity_id);
  });

  it('a replay with another contact: same activity id, the contact resolved for this request', async () => {
    const shop = await createTestShop(rt);
    const a = await post('/events/', event({ remote_id: 'o-9', contact: { email: 'first@example.com' } }), shop.headers);
    const b = await post('/events/', event({ remote_id: 'o-9', contact: { email: 'second@example.com' } }), shop.headers);
    expect(b.body.activity_id).toBe(a.body.activity_id);
    expect(a.body.contact).toEqual({ id: expect.any(String), email: 'first@example.com' });
    expect(b.body.contact).toEqual({ id: expect.any(String), email: 'second@example.com' });
    expect(b.body.contact.id).not.toBe(a.body.contact.id);
  });
});

describe('when Kafka cannot take the write', () => {
  it('503 unavailable with Retry-After, no item reported accepted, nothing on the log', async () => {
    const shop = await createTestShop(rt);
    // A real Kafka client pointed at a closed port: the broker is unreachable. (openRuntime cannot start
    // there, as it creates the topics first; the ingest service itself only needs the bus.)
    const deadBus = await createKafkaBus({
      brokers: ['127.0.0.1:1'],
      clientId: 'ingest-dead',
      replicationFactor: 1,
      logger: rt.logger,
      publishTimeoutMs: 1_000,
    });
    const deadRt: Runtime = { ...rt, bus: deadBus, close: async () => {} };
    const dead = await startTestServer(deadRt, [await startIngestApi(deadRt)]);
    try {
      const metricBefore = await unavailableCount();
      const single = await post('/events/', event({ contact: { email: 'kafka-down@example.com' } }), shop.headers, false, dead.baseUrl);
      expectError(single, 503, 'unavailable', {});
      expect(single.headers.get('retry-after')).toBe('5');
      const bulk = await post('/events/bulk/', { events: [event({ name: 'lost' }), { bad: 1 }] }, shop.headers, false, dead.baseUrl);
      expectError(bulk, 503, 'unavailable', {});
      expect(bulk.headers.get('retry-after')).toBe('5');
      expect(await unavailableCount()).toBe(metricBefore + 2);
    } finally {
      await dead.stop();
      await deadBus.close();
    }
    const marker = await post('/events/', event({ name: 'marker' }), shop.headers);
    const mine = await shopRecords(shop.shopId, (rs) => rs.some((r) => json(r).activity_id === marker.body.activity_id));
    expect(mine.map((r) => json(r).name)).toEqual(['marker']);
  });
});

describe('a request whose client gave up', () => {
  it('is dropped before its events are published: nothing on the log, counted abandoned and as a 499', async () => {
    const shop = await createTestShop(rt);
    const abandonedBefore = await metricSum('shopstream_ingest_events_total', ['outcome="abandoned"', 'endpoint="single"']);
    const closedBefore = await metricSum('shopstream_http_requests_total', ['route="/v2026-04/events/"', 'status="499"']);
    const gaveUp = event({ name: 'gave up', contact: { email: `${randomUUID()}@example.com` } });
    await giveUpDuringContactLookup(rt, server.baseUrl, '/v2026-04/events/', shop.headers, gaveUp);
    // The look-up goes on once the lock is gone; the request stops before publishing.
    await waitFor(async () => (await metricSum('shopstream_ingest_events_total', ['outcome="abandoned"', 'endpoint="single"'])) === abandonedBefore + 1, {
      message: 'the event counted abandoned',
    });
    // A later event of the same shop (same partition): once it is on the log, the dropped one would be before it.
    const marker = await post('/events/', event({ name: 'marker' }), shop.headers);
    expect(marker.status).toBe(202);
    const mine = await shopRecords(shop.shopId, (rs) => rs.some((r) => json(r).activity_id === marker.body.activity_id));
    expect(mine.map((r) => json(r).activity_id)).toEqual([marker.body.activity_id]);
    expect(await metricSum('shopstream_http_requests_total', ['route="/v2026-04/events/"', 'status="499"'])).toBe(closedBefore + 1);
  });
});

/** The sum of a metric's series of this file's server (harness metricSum). */
const metricSum = (name: string, labels: string[]) => harnessMetricSum(server.baseUrl, name, labels);

const unavailableCount = () => metricSum('shopstream_ingest_events_total', ['outcome="unavailable"']);

describe('the database is not touched for events without a contact', () => {
  it('a bulk request without contacts creates no contact row', async () => {
    const shop = await createTestShop(rt);
    expect((await post('/events/bulk/', { events: [event(), event()] }, shop.headers)).status).toBe(200);
    expect(await rt.db.query(sql`SELECT count(*)::int AS n FROM contacts WHERE shop_id = ${shop.shopId}`)).toEqual([{ n: 0 }]);
  });
});

describe('abuse costs the abuser', () => {
  let rtLarge: Runtime;
  let large: TestServer;
  beforeAll(async () => {
    // Small thresholds, so a body of a few KB is large; one at a time, and a short wait before the 503.
    // Three failed key look-ups per address.
    rtLarge = await startTestRuntime(
      {
        INGEST_LARGE_BODY_BYTES: '2000',
        INGEST_MAX_LARGE_BODIES: '1',
        INGEST_LARGE_BODY_WAIT_MS: '300',
        AUTH_FAILURE_BURST: '3',
        AUTH_FAILURES_PER_MINUTE: '1',
      },
      'ingest-large',
    );
    large = await startTestServer(rtLarge, [await startIngestApi(rtLarge)]);
  });
  afterAll(async () => {
    await large?.stop();
  });

  it('while a large body holds the one turn, another waits and gets 503 + Retry-After; small requests go on; then large bodies are taken again', async () => {
    const shop = await createTestShop(rtLarge);
    const body = JSON.stringify({ events: Array.from({ length: 20 }, (_, i) => event({ description: `${i} ${'x'.repeat(200)}` })) });
    expect(Buffer.byteLength(body)).toBeGreaterThan(2000);
    // The first large body arrives slowly: half now, the rest when the test says, holding its turn meanwhile.
    const url = new URL(`${large.baseUrl}/v2026-04/events/bulk/`);
    const slow = http.request(url, {
      method: 'POST',
      headers: { ...shop.headers, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) },
    });
    const slowAnswer = new Promise<{ status: number; body: any }>((resolve, reject) => {
      slow.on('response', (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString('utf8')));
        res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
      });
      slow.on('error', reject);
    });
    const bytes = Buffer.from(body);
    slow.write(bytes.subarray(0, 1000));
    // The turn is taken once its headers are in: wait until a second large body is refused for want of one.
    let second: Answer | undefined;
    await waitFor(async () => (second = await post('/events/bulk/', body, shop.headers, true, large.baseUrl)).status === 503, {
      timeoutMs: 30_000,
      message: 'a second large body refused while the first holds the turn',
    });
    expectError(second!, 503, 'unavailable', {});
    expect(second!.headers.get('retry-after')).toBe('2');
    // Small bodies never wait for a turn.
    expect((await post('/events/', event(), shop.headers, false, large.baseUrl)).status).toBe(202);
    slow.end(bytes.subarray(1000));
    const first = await slowAnswer;
    expect(first.status).toBe(200);
    expect(first.body.results.map((r: { status: string }) => r.status)).toEqual(Array(20).fill('success'));
    expect((await post('/events/bulk/', body, shop.headers, true, large.baseUrl)).status).toBe(200);
  });

  it('distinct unknown keys from one address: 401 for the first three, then 429 + Retry-After; wrong-shape keys 401; a key in use goes on', async () => {
    const shop = await createTestShop(rtLarge);
    expect((await post('/events/', event(), shop.headers, false, large.baseUrl)).status).toBe(202);
    const secrets = Array.from({ length: 10 }, () => `ssk_${randomUUID().replace(/-/g, '')}${'0'.repeat(11)}`);
    const answers: Answer[] = [];
    for (const secret of secrets) answers.push(await post('/events/', event(), { ...shop.headers, authorization: `Bearer ${secret}` }, false, large.baseUrl));
    expect(answers.map((a) => a.status)).toEqual([401, 401, 401, 429, 429, 429, 429, 429, 429, 429]);
    expectError(answers[9], 429, 'rate_limited', { authorization: 'Not checked: too many failed authentications from this address.' });
    expect(Number(answers[9].headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // A key already looked up is answered from the cache of misses, and a secret of no key's shape needs no look-up: 401.
    for (const secret of [secrets[0], 'not-a-key']) {
      expectError(await post('/events/', event(), { ...shop.headers, authorization: `Bearer ${secret}` }, false, large.baseUrl), 401, 'unauthorized', {
        authorization: 'Unknown or revoked key.',
      });
    }
    expect((await post('/events/', event(), shop.headers, false, large.baseUrl)).status).toBe(202);
  });
});

/** A counter of the process's /metrics (every runtime of this file shares the registry). */
async function metricValue(name: string): Promise<number> {
  const text = await (await fetch(`${server.baseUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ').pop()) : 0;
}

describe('large bodies prepared in the body pool', () => {
  // The same database and topics as `server` (whose threshold, 1 MiB, keeps these bodies on the event loop):
  // one shop and one key answer on both, so the two paths' answers and records can be compared.
  let rtPool: Runtime;
  let pooled: TestServer;
  let rtCrash: Runtime;
  let crashing: TestServer;
  beforeAll(async () => {
    const shared = { DATABASE_URL: rt.env.DATABASE_URL, TOPIC_PREFIX: rt.env.TOPIC_PREFIX, INGEST_LARGE_BODY_BYTES: '1000', INGEST_BODY_WORKERS: '1' };
    // Its records are published in parts of about 1,500 bytes: the answers and records are the same.
    rtPool = await startTestRuntime({ ...shared, INGEST_LARGE_BODY_WAIT_MS: '600000', INGEST_SEND_PART_BYTES: '1500' }, 'ingest-pool');
    pooled = await startTestServer(rtPool, [await startIngestApi(rtPool)]);
    // Its first body worker exits as soon as it is handed a body (as a crash would end it); the next ones are real.
    rtCrash = await startTestRuntime({ ...shared, INGEST_LARGE_BODY_WAIT_MS: '600000' }, 'ingest-crash');
    let spawned = 0;
    const spawn = () =>
      spawned++ === 0 ? new Worker("require('node:worker_threads').parentPort.once('message', () => process.exit(3));", { eval: true }) : spawnBodyWorker();
    crashing = await startTestServer(rtCrash, [await ingestApi(ingestApiService.context(rtCrash), spawn)]);
  });
  afterAll(async () => {
    await pooled?.stop();
    await crashing?.stop();
  });

  /** An answer with the request id (the header's, and in error bodies) replaced, to compare two requests' answers. */
  const normal = (a: Answer) => {
    const id = a.headers.get('x-request-id')!;
    return { status: a.status, retryAfter: a.headers.get('retry-after'), body: JSON.parse(JSON.stringify(a.body).replaceAll(id, '<request-id>')) };
  };
  /** The same raw body to the event-loop path (`server`) and to the pool (`pooled`): both answers, normalised. */
  async function both(path: string, raw: string, headers: Record<string, string>) {
    expect(Buffer.byteLength(raw)).toBeGreaterThan(1000);
    const before = await metricValue('shopstream_ingest_body_worker_bodies_total');
    const inThread = normal(await post(path, raw, headers, true));
    const inPool = normal(await post(path, raw, headers, true, pooled.baseUrl));
    // The pooled request was prepared by a worker (the in-thread one was not: it is under its server's threshold).
    expect(await metricValue('shopstream_ingest_body_worker_bodies_total')).toBe(before + 1);
    return { inThread, inPool };
  }

  const pad = ' '.repeat(1200);
  const keyed = (over: Record<string, unknown> = {}) =>
    event({ event_time: '2026-04-01T10:00:00Z', remote_platform: 'shopify', remote_id: `order-${randomUUID()}`, ...over });

  it('a bulk of valid, duplicate and invalid items: the same 200 results as on the event loop, and the same records', async () => {
    const shop = await createTestShop(rt);
    const first = keyed({
      description: 'é'.repeat(300),
      contact: { email: ' Ada@Example.COM ', phone: '+44 20 7946 0958', name: 'Ada' },
      metric: { metric_name: 'placed_order', value: 149.9, additional_properties: { cart: { items: [1, 'two', { three: null }], contact: null } } },
    });
    const items = [
      first,
      keyed({ metric: { metric_name: 'viewed', deduping_key: 'd-1' }, remote_id: undefined, remote_platform: undefined }),
      { ...first, name: 'again' },
      keyed({ contact: { phone: '12' } }),
      keyed({ metric: { metric_name: 'deep', additional_properties: JSON.parse('{"a":'.repeat(17) + '1' + '}'.repeat(17)) } }),
      { metric: { metric_name: '' }, extra: 1 },
      keyed({ name: 'nul \u0000 in a name' }),
      keyed({ metric: { metric_name: 'big', additional_properties: { n: 7 } } }),
    ];
    // An integer beyond 2^53, as a client sends it (JSON.stringify cannot write one).
    const raw = '\uFEFF' + JSON.stringify({ events: items }).replace('"n":7', '"n":12345678901234567890') + pad;
    const { inThread, inPool } = await both('/events/bulk/', raw, shop.headers);
    expect(inThread.status).toBe(200);
    expect(inThread.body.results.map((r: { status: string }) => r.status)).toEqual([
      'success',
      'success',
      'success',
      'error',
      'error',
      'error',
      'error',
      'error',
    ]);
    expect(inPool).toEqual(inThread);
    // Each path wrote one record per distinct activity (first and "again" are one): identical but for the request
    // that wrote it (request_id, received_at).
    const ids = inThread.body.results.slice(0, 2).map((r: { event: { activity_id: string } }) => r.event.activity_id);
    const records = await shopRecords(shop.shopId, (rs) => rs.length >= 4);
    expect(records).toHaveLength(4);
    // A sealed part differs by its random nonce: compared opened (with the contact's data key), and as written but
    // for its nonce and ciphertext.
    const keys = new KeyCache(await openKeyring(rt));
    const strip = async (r: BusRecord) => {
      const { request_id: _r, received_at: _t, sealed, ...rest } = json(r) as { sealed?: object } & Record<string, unknown>;
      const [opened] = await openEventRecords(rt.db, keys, [{ record: r, value: storedEventRecordSchema.parse(json(r)) }], rt.logger);
      const { request_id: _r2, received_at: _t2, ...plain } = opened.value;
      return { key: r.key, headers: r.headers, value: { ...rest, sealed: sealed && Object.keys(sealed) }, opened: plain };
    };
    for (const id of ids) {
      const two = records.filter((r) => json(r).activity_id === id);
      expect(two).toHaveLength(2);
      expect(await strip(two[1])).toEqual(await strip(two[0]));
    }
    // The first event's contact and personal fields went on the log sealed, by both paths.
    expect(records.filter((r) => json(r).sealed !== undefined)).toHaveLength(2);
  });

  it('the bulk body 400s (not {events: [1..100]}, not JSON) and the single event 202 and 400: the same as on the event loop', async () => {
    const shop = await createTestShop(rt);
    const bodies: [string, string][] = [
      ['/events/bulk/', JSON.stringify({ events: [] }) + pad],
      ['/events/bulk/', JSON.stringify({ events: 'x', other: 1 }) + pad],
      ['/events/bulk/', JSON.stringify([event()]) + pad],
      ['/events/bulk/', JSON.stringify({ events: Array.from({ length: 101 }, () => event()) })],
      ['/events/bulk/', '{"events": [' + pad],
      ['/events/', JSON.stringify(keyed({ contact: { email: 'grace@example.com' } })) + pad],
      ['/events/', JSON.stringify({ name: '', metric: { metric_name: 'x', value: 'NaN' }, contact: {}, event_time: '2026-13-01' }) + pad],
      ['/events/', '{"name": ' + pad],
    ];
    const statuses: number[] = [];
    for (const [path, raw] of bodies) {
      const { inThread, inPool } = await both(path, raw, shop.headers);
      expect(inPool).toEqual(inThread);
      statuses.push(inThread.status);
    }
    expect(statuses).toEqual([400, 400, 400, 400, 400, 202, 400, 400]);
    // A charset body-parser refuses ("utf8" is not "utf-…") is left to it, on both paths: the same 415.
    for (const charset of ['utf8', 'utf-16']) {
      const headers = { ...shop.headers, 'content-type': `application/json; charset=${charset}` };
      const raw = JSON.stringify({ events: [event()] }) + pad;
      expect(normal(await post('/events/bulk/', raw, headers, true, pooled.baseUrl))).toEqual(normal(await post('/events/bulk/', raw, headers, true)));
    }
  });

  it('a worker that ends while holding a body: that request 503 + Retry-After, the end counted; another worker takes the next large body', async () => {
    const shop = await createTestShop(rt);
    const restarts = await metricValue('shopstream_ingest_body_worker_restarts_total');
    const body = JSON.stringify({ events: [event()] }) + pad;
    const refused = await post('/events/bulk/', body, shop.headers, true, crashing.baseUrl);
    expectError(refused, 503, 'unavailable', {});
    expect(refused.headers.get('retry-after')).toBe('5');
    expect(await metricValue('shopstream_ingest_body_worker_restarts_total')).toBe(restarts + 1);
    // Another worker took its place.
    const next = await post('/events/bulk/', body, shop.headers, true, crashing.baseUrl);
    expect(next.status).toBe(200);
    expect(next.body.results[0].status).toBe('success');
  });
});
