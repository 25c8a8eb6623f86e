import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { headers as H, schemas, type ConversationRecord } from '@shopstream/contracts';
import { sql } from '@shopstream/db';
import type { Runtime } from '@shopstream/runtime';
import { serviceFactories } from '@shopstream/all-in-one';
import { createTestShop, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/testkit/harness';

/**
 * Cross-shop: every operation of the served OpenAPI document tried with a key of another shop, and with ids and
 * cursors of another shop under its own key. Nothing of shop A is revealed or changed through shop B: a key
 * not granted a shop is 403 on every operation, A's ids are 404 in B, A's cursors are 400 in B, and A's data
 * reads the same afterwards.
 */
type Shop = Awaited<ReturnType<typeof createTestShop>>;
let rt: Runtime;
let server: TestServer;
let a: Shop;
let b: Shop;
const A: { activity?: string; contact?: string; flow?: string; conversation?: string } = {};
const cursors: Record<string, string> = {};

const call = async (shop: Shop, method: string, p: string, body?: unknown, headers: Record<string, string> = shop.headers) => {
  const res = await fetch(p.startsWith('http') ? p : `${server.baseUrl}/v2026-04${p}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as any) : null };
};

beforeAll(async () => {
  rt = await startTestRuntime({ FLOW_REFRESH_MS: '300' }, 'cross-shop');
  const started = [];
  for (const f of Object.values(serviceFactories)) started.push(await f(rt));
  server = await startTestServer(rt, started);
  a = await createTestShop(rt);
  b = await createTestShop(rt);
  // Shop A's data: two activities with a contact, one without, a flow with a trigger, two conversations.
  const flow = await call(a, 'POST', '/flows/', { name: 'A orders', trigger: { metric_name: 'placed_order' } });
  A.flow = flow.body.id;
  await waitFor(async () => /^shopstream_flow_matcher_active_flows [1-9]/m.test(await (await fetch(`${server.baseUrl}/metrics`)).text()), { message: 'the flow loaded' });
  for (const body of [
    { name: 'Placed order', metric: { metric_name: 'placed_order' }, contact: { email: 'a@example.com' } },
    { name: 'Placed order 2', metric: { metric_name: 'placed_order' }, contact: { email: 'a@example.com' } },
    { name: 'Viewed', metric: { metric_name: 'viewed' } },
    { name: 'Viewed 2', metric: { metric_name: 'viewed' } },
  ]) {
    const r = await call(a, 'POST', '/events/', body);
    A.activity ??= r.body.activity_id;
    A.contact ??= r.body.contact?.id;
  }
  const at = (i: number) => new Date(Date.now() - (5 - i) * 60_000).toISOString();
  const records: ConversationRecord[] = [0, 1].map((i) => ({
    type: 'conversation.upserted',
    shop_id: a.shopId,
    conversation: { id: randomUUID(), agent_id: null, contact_id: null, user_id: null, created_at: at(i), updated_at: at(i), flags: [], tags: [], intent: {}, topic: {}, type: 'email' },
  }));
  A.conversation = (records[0] as { conversation: { id: string } }).conversation.id;
  await rt.bus.publish(rt.topics.conversations, records.map((r) => ({ key: a.shopId, value: JSON.stringify(r), headers: { [H.contentType]: 'application/json', [H.schema]: schemas.conversationRecord, [H.shopId]: a.shopId } })));
  await waitFor(async () => (await rt.db.query(sql`SELECT count(*)::int AS n FROM flow_triggers WHERE shop_id = ${a.shopId}`))[0]?.n === 2, { message: 'A projected', timeoutMs: 30_000 });
  await waitFor(async () => (await rt.db.query(sql`SELECT count(*)::int AS n FROM conversations WHERE shop_id = ${a.shopId}`))[0]?.n === 2, { message: 'A conversations', timeoutMs: 30_000 });
  await call(a, 'POST', '/flows/', { name: 'A second', trigger: { metric_name: 'other' } });
  // A's cursors: the second page of each list.
  const next = async (p: string) => (await call(a, 'GET', p)).body.next as string;
  cursors.activities = await next('/activities/?scope=workspace&limit=1');
  cursors.timeline = await next(`/contacts/${A.contact}/timeline/?limit=1`);
  cursors.flows = await next('/flows/?limit=1');
  cursors.export = await next('/conversations/export/?created_at__range=relative:-1d,&limit=1');
  for (const [k, v] of Object.entries(cursors)) expect(v, `A's ${k} has a second page`).toMatch(/cursor=/);
}, 120_000);
afterAll(async () => {
  await server?.stop();
  await rt?.close();
});

/** What shop A holds, as A reads it: compared before and after B's attempts. */
async function snapshot() {
  return {
    activity: (await call(a, 'GET', `/activities/${A.activity}/`)).body,
    timeline: (await call(a, 'GET', `/contacts/${A.contact}/timeline/`)).body.results,
    workspace: (await call(a, 'GET', '/activities/?scope=workspace')).body.results,
    flows: (await call(a, 'GET', '/flows/')).body.results,
    triggers: (await call(a, 'GET', `/flows/${A.flow}/triggers/`)).body.results,
    export: (await call(a, 'GET', '/conversations/export/?created_at__range=relative:-1d,')).body.results,
  };
}

it("answers 403 on every operation for a key not granted the shop, and changes nothing", async () => {
  const before = await snapshot();
  const doc = (await (await fetch(`${server.baseUrl}/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> };
  const ids: Record<string, string> = { id: A.flow!, contact_id: A.contact! };
  let tried = 0;
  for (const [template, ops] of Object.entries(doc.paths)) {
    for (const method of Object.keys(ops)) {
      const p = template.replace('/v2026-04', '').replace(/\{(\w+)\}/g, (_m, name: string) => (template.includes('activities') ? A.activity! : ids[name]));
      const query = template.endsWith('/activities/') ? '?scope=workspace' : template.endsWith('/export/') ? '?created_at__range=relative:-1d,' : '';
      const body = method === 'post' ? (template.includes('flows') ? { name: 'x', trigger: { metric_name: 'x' } } : template.includes('bulk') ? { events: [{ name: 'x', metric: { metric_name: 'x' } }] } : { name: 'x', metric: { metric_name: 'x' } }) : method === 'patch' ? { status: 'paused' } : undefined;
      // B's key, A's shop.
      const r = await call(b, method.toUpperCase(), `${p}${query}`, body, { ...b.headers, 'x-shop-id': a.shopId });
      expect({ op: `${method} ${template}`, status: r.status, code: r.body?.error?.code }).toEqual({ op: `${method} ${template}`, status: 403, code: 'forbidden' });
      tried++;
    }
  }
  expect(tried).toBe(12);
  expect(await snapshot()).toEqual(before);
});

it("answers 404 for another shop's ids and 400 for its cursors, under the shop's own key, and changes nothing", async () => {
  const before = await snapshot();
  expect((await call(b, 'GET', `/activities/${A.activity}/`)).status).toBe(404);
  expect((await call(b, 'GET', `/contacts/${A.contact}/timeline/`)).status).toBe(404);
  expect((await call(b, 'GET', `/flows/${A.flow}/`)).status).toBe(404);
  expect((await call(b, 'PATCH', `/flows/${A.flow}/`, { status: 'paused', name: 'taken' })).status).toBe(404);
  expect((await call(b, 'GET', `/flows/${A.flow}/triggers/`)).status).toBe(404);
  expect((await call(b, 'DELETE', `/flows/${A.flow}/`)).status).toBe(404);
  for (const [list, url] of Object.entries(cursors)) {
    const r = await call(b, 'GET', url.replace(/^https?:\/\/[^/]+\/v2026-04/, ''));
    // The timeline's link carries A's contact id in its path: not B's contact, so 404 before the cursor is read.
    const expected = list === 'timeline' ? { status: 404, code: 'not_found' } : { status: 400, code: 'invalid_cursor' };
    expect({ list, status: r.status, code: r.body.error?.code }).toEqual({ list, ...expected });
  }
  // B's own lists hold nothing of A's.
  expect((await call(b, 'GET', '/activities/?scope=workspace')).body.results).toEqual([]);
  expect((await call(b, 'GET', '/flows/')).body.results).toEqual([]);
  expect((await call(b, 'GET', '/conversations/export/?created_at__range=relative:-1d,')).body.results).toEqual([]);
  // An event B records with A's contact id as its own identifier stays B's.
  const own = await call(b, 'POST', '/events/', { name: 'B order', metric: { metric_name: 'placed_order' }, contact: { remote_id: A.contact } });
  expect(own.status).toBe(202);
  expect(own.body.contact.id).not.toBe(A.contact);
  // A's timeline cursor on B's own contact: refused.
  const aCursor = new URL(cursors.timeline).searchParams.get('cursor')!;
  const r = await call(b, 'GET', `/contacts/${own.body.contact.id}/timeline/?limit=1&cursor=${encodeURIComponent(aCursor)}`);
  expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 400, code: 'invalid_cursor' });
  expect(await snapshot()).toEqual(before);
});
