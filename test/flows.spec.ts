import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { sql } from '@shopstream/db';
import { flowTriggerRecordSchema, headers as H, schemas } from '@shopstream/contracts';
import type { BusRecord } from '@shopstream/bus';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startActivityProjector } from '@shopstream/activity-projector';
import { startFlowMatcher } from '@shopstream/flow-matcher';
import { startQueryApi } from '@shopstream/query-api';
import { createTestShop, json, readTopic, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';

/**
 * Black box: flows managed over HTTP, events posted over HTTP, the projector and the matcher on the real
 * broker and database, triggers read over HTTP and from `flow-triggers`.
 */
let rt: Runtime;
let server: TestServer;
let matcher: StartedService;
let a: Awaited<ReturnType<typeof createTestShop>>;
let b: Awaited<ReturnType<typeof createTestShop>>;

beforeAll(async () => {
  // Consumer groups of their own: a group shared with other spec files would rebalance with theirs.
  rt = await startTestRuntime({ CONSUMER_GROUP_PREFIX: `flows-spec-${randomUUID()}.` }, 'flows-spec');
  server = await startTestServer(rt, [await startActivityProjector(rt), await startIngestApi(rt), await startQueryApi(rt)]);
  a = await createTestShop(rt);
  b = await createTestShop(rt);
});
afterAll(async () => {
  await matcher?.stop();
  await server?.stop();
});

type Shop = typeof a;
const call = async (method: string, path: string, shop: Shop, body?: unknown) => {
  const res = await fetch(path.startsWith('http') ? path : `${server.baseUrl}/v2026-04${path}`, {
    method,
    headers: shop.headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as any) : null, headers: res.headers };
};
const distinct = (rs: BusRecord[]) => [...new Map(rs.map((r) => [`${r.partition}/${r.offset}`, r])).values()];

const vipTrigger = {
  metric_name: 'placed_order',
  property_conditions: [{ field: 'cart.total', op: 'gte', value: 100 }],
  contact_conditions: [{ field: 'email', op: 'ends_with', value: '@vip.example' }],
};

describe('flows over HTTP', () => {
  it('create, read, list, change, delete', async () => {
    const created = await call('POST', '/flows/', a, { name: 'VIP orders', trigger: vipTrigger });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ name: 'VIP orders', status: 'active', trigger: vipTrigger });
    const id = created.body.id;
    expect(created.headers.get('location')).toBe(`/v2026-04/flows/${id}/`);
    expect((await call('GET', `/flows/${id}/`, a)).body).toEqual(created.body);
    expect((await call('GET', `/flows/${id}/`, b)).status).toBe(404);

    const second = await call('POST', '/flows/', a, { name: 'Any view', status: 'paused', trigger: { metric_name: 'viewed_product' } });
    expect(second.body.trigger).toEqual({ metric_name: 'viewed_product', property_conditions: [], contact_conditions: [] });
    const list = await call('GET', '/flows/', a);
    expect(list.body.results.map((f: any) => f.id)).toEqual([second.body.id, id]);
    const page1 = await call('GET', '/flows/?limit=1', a);
    expect(page1.body.results.map((f: any) => f.id)).toEqual([second.body.id]);
    const page2 = await call('GET', page1.body.next, a);
    expect(page2.body.results.map((f: any) => f.id)).toEqual([id]);
    expect(page2.body.next).toBeNull();
    expect((await call('GET', '/flows/?status=paused', a)).body.results.map((f: any) => f.id)).toEqual([second.body.id]);
    // A cursor made for one filter is refused with another.
    const paused1 = await call('GET', '/flows/?status=paused&limit=1', a);
    expect(paused1.body.next).toBeNull();
    const wrong = await call('GET', page1.body.next.replace('?limit=1', '?status=paused&limit=1'), a);
    expect(wrong.body.error.code).toBe('invalid_cursor');
    expect((await call('GET', '/flows/', b)).body.results).toEqual([]);

    const patched = await call('PATCH', `/flows/${id}/`, a, { status: 'paused', name: 'VIP orders (paused)' });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ id, status: 'paused', name: 'VIP orders (paused)', trigger: vipTrigger });
    expect(Date.parse(patched.body.updated_at)).toBeGreaterThanOrEqual(Date.parse(created.body.updated_at));
    expect((await call('PATCH', `/flows/${id}/`, b, { status: 'active' })).status).toBe(404);

    expect((await call('DELETE', `/flows/${id}/`, b)).status).toBe(404);
    expect((await call('DELETE', `/flows/${id}/`, a)).status).toBe(204);
    expect((await call('GET', `/flows/${id}/`, a)).status).toBe(404);
    expect((await call('DELETE', `/flows/${id}/`, a)).status).toBe(404);
    expect((await call('GET', `/flows/${id}/triggers/`, a)).status).toBe(404);
    await call('DELETE', `/flows/${second.body.id}/`, a);
  });

  it('rejects bad triggers with 400 validation_error naming each field', async () => {
    const bad = async (trigger: unknown) => {
      const r = await call('POST', '/flows/', a, { name: 'bad', trigger });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('validation_error');
      return r.body.error.fields;
    };
    expect(Object.keys(await bad({ metric_name: 'x', property_conditions: [{ field: 'a', op: 'like', value: 'x' }] }))).toEqual([
      'trigger.property_conditions.0.op',
    ]);
    expect(Object.keys(await bad({ metric_name: 'x', property_conditions: [{ field: 'a', op: 'gt', value: '10' }] }))).toEqual([
      'trigger.property_conditions.0.value',
    ]);
    expect(Object.keys(await bad({ metric_name: 'x', property_conditions: [{ field: 'a', op: 'in', value: 'x' }] }))).toEqual([
      'trigger.property_conditions.0.value',
    ]);
    expect(Object.keys(await bad({ metric_name: '  ' }))).toEqual(['trigger.metric_name']);
    expect(Object.keys(await bad({ metric_name: 'x', contact_conditions: [{ field: 'address', op: 'exists' }] }))).toEqual([
      'trigger.contact_conditions.0.field',
    ]);
    expect(Object.keys(await bad({ metric_name: 'x', property_conditions: [{ field: 'a', op: 'exists', value: 1 }] }))).toEqual([
      'trigger.property_conditions.0.value',
    ]);
    expect(Object.keys(await bad({ metric_name: 'x', property_conditions: [{ field: 'a..b', op: 'exists' }] }))).toEqual([
      'trigger.property_conditions.0.field',
    ]);
    const empty = await call('PATCH', `/flows/${randomUUID()}/`, a, {});
    expect(empty.status).toBe(400);
    expect((await call('GET', '/flows/?limit=abc', a)).body.error.fields).toHaveProperty('limit');
  });

  it('refuses text Postgres cannot store (NUL, a lone surrogate) in a name, metric name or condition, on POST and PATCH: 400, nothing stored', async () => {
    // A shop of its own: the flow it creates must not trigger in the other tests' shops.
    const own = await createTestShop(rt);
    // Sent as raw JSON: "\u0000" and "\ud800" are valid JSON escapes (JSON.stringify would re-escape a lone surrogate anyway).
    const raw = async (method: string, path: string, text: string) => {
      const res = await fetch(`${server.baseUrl}/v2026-04${path}`, { method, headers: own.headers, body: text });
      return { status: res.status, body: (await res.json()) as any, requestId: res.headers.get('x-request-id') };
    };
    const trigger = (metric: string, value: string) =>
      `{"metric_name": "${metric}", "property_conditions": [{"field": "cart.total", "op": "eq", "value": "${value}"}]}`;
    const cases: [string, string][] = [
      [`{"name": "big\\u0000orders", "trigger": ${trigger('placed_order', 'x')}}`, 'name'],
      [`{"name": "big \\ud800 orders", "trigger": ${trigger('placed_order', 'x')}}`, 'name'],
      [`{"name": "big", "trigger": ${trigger('placed\\u0000order', 'x')}}`, 'trigger.metric_name'],
      [`{"name": "big", "trigger": ${trigger('placed_order', '\\udc00')}}`, 'trigger.property_conditions.0.value'],
    ];
    for (const [body, field] of cases) {
      const r = await raw('POST', '/flows/', body);
      expect(r.status, body).toBe(400);
      expect(r.body).toEqual({
        error: {
          code: 'validation_error',
          message: expect.any(String),
          request_id: r.requestId,
          fields: { [field]: expect.stringContaining('cannot be stored') },
        },
      });
    }
    const created = await call('POST', '/flows/', own, { name: 'storable', trigger: { metric_name: 'placed_order' } });
    expect(created.status).toBe(201);
    const patched = await raw('PATCH', `/flows/${created.body.id}/`, '{"name": "still\\u0000bad"}');
    expect(patched.status).toBe(400);
    expect(patched.body.error.fields).toEqual({ name: expect.stringContaining('cannot be stored') });
    expect((await call('GET', `/flows/${created.body.id}/`, own)).body.name).toBe('storable');
    const names = (await call('GET', '/flows/', own)).body.results.map((f: { name: string }) => f.name);
    expect(names.some((n: string) => n.includes('\uFFFD') || n.includes('\u0000'))).toBe(false);
  });

  it("refuses a list cursor on another flow's triggers, on another list and with another shop: 400 invalid_cursor", async () => {
    // Paused, on a metric no event here has: the matcher of the tests below never sees these flows.
    const probe = { name: 'cursor probe', status: 'paused', trigger: { metric_name: `cursor_probe_${randomUUID()}` } };
    const g = (await call('POST', '/flows/', a, probe)).body.id as string;
    const f = (await call('POST', '/flows/', a, probe)).body.id as string;
    const trigger = (at: string) => sql`
      INSERT INTO flow_triggers (shop_id, id, flow_id, metric_event_id, activity_id, contact_id, matched_at)
      VALUES (${a.shopId}, ${randomUUID()}, ${g}, ${randomUUID()}, ${randomUUID()}, NULL, ${at}::timestamptz)`;
    await rt.db.query(trigger('2026-04-01T10:00:00Z'));
    await rt.db.query(trigger('2026-04-01T11:00:00Z'));
    const invalid = (r: { status: number; body: any }) => {
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('invalid_cursor');
    };

    const gFirst = await call('GET', `/flows/${g}/triggers/?limit=1`, a);
    expect(gFirst.body.results).toHaveLength(1);
    const gNext = new URL(gFirst.body.next);
    // What the cursor pins stays inside it: the link repeats limit and adds the cursor, nothing else.
    expect([...gNext.searchParams.keys()]).toEqual(['limit', 'cursor']);
    const gPage2 = await call('GET', gNext.href, a);
    expect(gPage2.status).toBe(200);
    expect(gPage2.body.results.map((t: any) => t.flow_id)).toEqual([g]);
    // g's cursor on f's triggers: same shop, same filters otherwise.
    invalid(await call('GET', gNext.href.replace(`/flows/${g}/`, `/flows/${f}/`), a));
    // A triggers cursor on the flows list (which has no filter when no status is given).
    invalid(await call('GET', `/flows/?limit=1&cursor=${gNext.searchParams.get('cursor')}`, a));
    invalid(await call('GET', `/activities/?scope=workspace&limit=1&cursor=${gNext.searchParams.get('cursor')}`, a));

    // Shop a's flows cursor, with shop b's X-Shop-Id (b's own key).
    const flowsFirst = await call('GET', '/flows/?limit=1', a);
    expect((await call('GET', flowsFirst.body.next, a)).status).toBe(200);
    invalid(await call('GET', flowsFirst.body.next, b));

    await call('DELETE', `/flows/${g}/`, a);
    await call('DELETE', `/flows/${f}/`, a);
  });
});

describe('list cursors across query-api processes', () => {
  it('a cursor from one query-api is accepted by another on the same database when CURSOR_SECRET is unset', async () => {
    const rtA = await startTestRuntime({ CURSOR_SECRET: undefined }, 'query-api-a');
    expect(rtA.env.CURSOR_SECRET).toBeUndefined();
    const rtB = await startTestRuntime({ CURSOR_SECRET: undefined, DATABASE_URL: rtA.env.DATABASE_URL, TOPIC_PREFIX: rtA.env.TOPIC_PREFIX }, 'query-api-b');
    expect([rtA.env.CURSOR_SECRET, rtB.env.CURSOR_SECRET]).toEqual([undefined, undefined]);
    const qa = await startTestServer(rtA, [await startQueryApi(rtA)]);
    // B serves a fresh copy of query-api and of the packages it uses (its routes, @shopstream/http, the server),
    // as another replica or a restart would: nothing module-level, such as a per-process secret, is shared with A.
    vi.resetModules();
    const fresh = (await import('@shopstream/query-api')) as typeof import('@shopstream/query-api');
    const freshServer = (await import('@shopstream/harness')) as typeof import('@shopstream/harness');
    expect(fresh.startQueryApi).not.toBe(startQueryApi);
    const qb = await freshServer.startTestServer(rtB, [await fresh.startQueryApi(rtB)]);
    try {
      const shop = await createTestShop(rtA);
      const on = (server: TestServer, path: string) =>
        fetch(path.startsWith('http') ? path : `${server.baseUrl}/v2026-04${path}`, { headers: shop.headers }).then(async (r) => ({
          status: r.status,
          body: (await r.json()) as any,
        }));
      const ids: string[] = [];
      for (const name of ['one', 'two', 'three']) {
        const r = await fetch(`${qa.baseUrl}/v2026-04/flows/`, {
          method: 'POST',
          headers: shop.headers,
          body: JSON.stringify({ name, trigger: { metric_name: 'placed_order' } }),
        });
        expect(r.status).toBe(201);
        ids.unshift(((await r.json()) as any).id);
      }
      const first = await on(qa, '/flows/?limit=1');
      expect(first.body.results.map((f: any) => f.id)).toEqual([ids[0]]);
      // The link A made, followed on B, and B's link followed back on A.
      const onB = await on(qb, first.body.next.replace(qa.baseUrl, qb.baseUrl));
      expect(onB.body.error).toBeUndefined();
      expect(onB.status).toBe(200);
      expect(onB.body.results.map((f: any) => f.id)).toEqual([ids[1]]);
      const backOnA = await on(qa, onB.body.next.replace(qb.baseUrl, qa.baseUrl));
      expect(backOnA.status).toBe(200);
      expect(backOnA.body.results.map((f: any) => f.id)).toEqual([ids[2]]);
      expect((await on(qa, onB.body.previous.replace(qb.baseUrl, qa.baseUrl))).body.results.map((f: any) => f.id)).toEqual([ids[0]]);
    } finally {
      await qb.stop();
      await qa.stop();
    }
  });
});

describe('flow matching', () => {
  let vip: string;
  let paused: string;
  let otherShops: string;
  const email = (local: string, domain: string) => `${local}-${randomUUID().slice(0, 8)}@${domain}`;
  const order = (shop: Shop, total: unknown, contactEmail: string | null, extra: Record<string, unknown> = {}) =>
    call('POST', '/events/', shop, {
      name: 'Placed order',
      metric: { metric_name: 'placed_order', additional_properties: { cart: { total } } },
      ...(contactEmail ? { contact: { email: contactEmail } } : {}),
      ...extra,
    }).then((r) => {
      expect(r.status).toBe(202);
      return r.body.activity_id as string;
    });
  const triggersOf = async (flowId: string, shop: Shop) => {
    const r = await call('GET', `/flows/${flowId}/triggers/`, shop);
    expect(r.status).toBe(200);
    return r.body.results as any[];
  };
  const waitForTrigger = (flowId: string, shop: Shop, activityId: string) =>
    waitFor(async () => (await triggersOf(flowId, shop)).some((t) => t.activity_id === activityId), { message: `trigger of ${flowId} for ${activityId}` });

  beforeAll(async () => {
    vip = (await call('POST', '/flows/', a, { name: 'VIP orders', trigger: vipTrigger })).body.id;
    paused = (await call('POST', '/flows/', a, { name: 'Paused VIP', status: 'paused', trigger: vipTrigger })).body.id;
    otherShops = (await call('POST', '/flows/', b, { name: 'Shop B VIP', trigger: vipTrigger })).body.id;
    // Started after the flows exist: its first index load holds them.
    matcher = await startFlowMatcher(rt);
  });

  it('triggers exactly for the events that satisfy metric, property and contact conditions', async () => {
    const yes1 = await order(a, 150, email('ada', 'vip.example'), { remote_id: `o-${randomUUID()}`, remote_platform: 'shop' });
    const lowTotal = await order(a, 50, email('bob', 'vip.example'));
    const otherDomain = await order(a, 150, email('cy', 'other.example'));
    const noContact = await order(a, 150, null);
    const totalAsString = await order(a, '150', email('dee', 'vip.example'));
    const noCart = await call('POST', '/events/', a, {
      name: 'Placed order',
      metric: { metric_name: 'placed_order' },
      contact: { email: email('eve', 'vip.example') },
    });
    const otherMetric = await call('POST', '/events/', a, {
      name: 'Viewed',
      metric: { metric_name: 'viewed_product', additional_properties: { cart: { total: 500 } } },
      contact: { email: email('fay', 'vip.example') },
    });
    const yes2 = await order(a, 100, email('gus', 'vip.example'));
    const shopB = await order(b, 300, email('hal', 'vip.example'));
    // One shop's records stay in order: once the last one's trigger exists, every earlier one was evaluated.
    await waitForTrigger(vip, a, yes2);
    await waitForTrigger(otherShops, b, shopB);

    const vipTriggers = await triggersOf(vip, a);
    expect(new Set(vipTriggers.map((t) => t.activity_id))).toEqual(new Set([yes1, yes2]));
    expect(vipTriggers).toHaveLength(2);
    for (const t of vipTriggers) expect(t).toMatchObject({ flow_id: vip, metric_event_id: t.activity_id });
    expect(await triggersOf(paused, a)).toEqual([]);
    expect((await triggersOf(otherShops, b)).map((t) => t.activity_id)).toEqual([shopB]);
    const never = [lowTotal, otherDomain, noContact, totalAsString, noCart.body.activity_id, otherMetric.body.activity_id];
    const stray = await rt.db.query(sql`SELECT activity_id FROM flow_triggers WHERE shop_id = ${a.shopId} AND activity_id = ANY(${never}::uuid[])`);
    expect(stray).toEqual([]);

    const records = distinct(await readTopic(rt, rt.topics.flowTriggers, (rs) => distinct(rs).length >= 3));
    expect(records).toHaveLength(3);
    const values = records.map((r) => flowTriggerRecordSchema.parse(json(r)));
    expect(new Set(values.map((v) => `${v.flow_id}/${v.activity_id}`))).toEqual(new Set([`${vip}/${yes1}`, `${vip}/${yes2}`, `${otherShops}/${shopB}`]));
    for (const r of records) {
      expect(r.headers).toMatchObject({ [H.schema]: schemas.flowTriggered, [H.contentType]: 'application/json', [H.metricName]: 'placed_order' });
      expect(r.key).toBe(json(r).shop_id);
    }

    // A replay of yes1 and a second copy of its metric event (as after a projector crash) trigger nothing new.
    const another = await order(a, 150, email('ada2', 'vip.example'));
    expect(another).not.toBe(yes1);
    const yes1Again = await call('POST', '/events/', a, {
      name: 'Placed order',
      metric: { metric_name: 'placed_order', additional_properties: { cart: { total: 150 } } },
      contact: { email: email('ada3', 'vip.example') },
      remote_id: (await rt.db.query(sql`SELECT remote_id FROM activities WHERE shop_id = ${a.shopId} AND id = ${yes1}`))[0].remote_id,
      remote_platform: 'shop',
    });
    expect(yes1Again.body.activity_id).toBe(yes1);
    const metricsOnLog = distinct(await readTopic(rt, rt.topics.metrics, (rs) => rs.some((r) => json(r).id === yes1)));
    const copy = metricsOnLog.find((r) => json(r).id === yes1)!;
    await rt.bus.publish(rt.topics.metrics, [{ key: copy.key!, value: copy.value, headers: copy.headers }]);
    const marker = await order(a, 101, email('ivy', 'vip.example'));
    await waitForTrigger(vip, a, marker);
    const after = await triggersOf(vip, a);
    expect(after.map((t) => t.activity_id).sort()).toEqual([yes1, yes2, another, marker].sort());
    expect(after.filter((t) => t.activity_id === yes1)).toHaveLength(1);
  });

  it('picks up flow changes without a restart', async () => {
    // Pause one flow and create another with the same trigger: once the new one triggers, the index holds
    // both changes (each refresh reloads every active flow at once).
    expect((await call('PATCH', `/flows/${vip}/`, a, { status: 'paused' })).status).toBe(200);
    const fresh = (await call('POST', '/flows/', a, { name: 'VIP orders v2', trigger: vipTrigger })).body.id;
    let probe = '';
    await waitFor(
      async () => {
        probe = await order(a, 120, email('jo', 'vip.example'));
        return (await waitFor(async () => (await rt.db.query(sql`SELECT 1 FROM activities WHERE shop_id = ${a.shopId} AND id = ${probe}`)).length > 0)) &&
          (await triggersOf(fresh, a)).length > 0
          ? true
          : null;
      },
      { timeoutMs: 60_000, intervalMs: 500, message: 'the new flow triggers' },
    );
    const last = await order(a, 130, email('kim', 'vip.example'));
    await waitForTrigger(fresh, a, last);
    expect((await triggersOf(vip, a)).some((t) => t.activity_id === last)).toBe(false);
    expect((await triggersOf(paused, a)).some((t) => t.activity_id === last)).toBe(false);
  });
});
