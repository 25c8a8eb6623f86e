import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Runtime } from '@shopstream/runtime';
import { serviceFactories } from '@shopstream/all-in-one';
import { createTestShop, startTestRuntime, startTestServer, type TestServer } from '@shopstream/harness';
import {
  caller,
  crossShopAttempts,
  ownEventWithForeignContact,
  revealsOrChanges,
  seedShop,
  snapshot,
  type Call,
  type Shop,
  type ShopData,
} from '@shopstream/testkit/crossShop';

/**
 * Cross-shop: every operation of the served OpenAPI document tried with a key of another shop, and with ids and
 * cursors of another shop under its own key. Nothing of shop A is revealed or changed through shop B: a key
 * not granted a shop is 403 on every operation, A's ids are 404 in B, A's cursors are 400 in B, and A's data
 * reads the same afterwards. The seeding, the attempts and the judgement are @shopstream/testkit/crossShop's,
 * shared with the `cross-shop` fault scenario.
 */
let rt: Runtime;
let server: TestServer;
let call: Call;
let doc: { paths: Record<string, Record<string, unknown>> };
let a: Shop;
let b: Shop;
let A: ShopData;

beforeAll(async () => {
  rt = await startTestRuntime({ FLOW_REFRESH_MS: '300' }, 'cross-shop');
  const started = [];
  for (const f of Object.values(serviceFactories)) started.push(await f(rt));
  server = await startTestServer(rt, started);
  call = caller(server.baseUrl);
  a = await createTestShop(rt);
  b = await createTestShop(rt);
  doc = (await (await fetch(`${server.baseUrl}/openapi.json`)).json()) as typeof doc;
  A = await seedShop(call, a, doc, { metricsUrl: `${server.baseUrl}/metrics`, publish: (records) => rt.bus.publish(rt.topics.conversations, records) });
  // The second page of each list: activities, a contact's timeline, flows, a flow's triggers, the export.
  expect(Object.keys(A.cursors).length).toBeGreaterThanOrEqual(5);
}, 120_000);
afterAll(async () => {
  await server?.stop();
  await rt?.close();
});

it('answers 403 on every operation for a key not granted the shop, and changes nothing', async () => {
  const before = await snapshot(call, a, A);
  const attempts = crossShopAttempts(doc, A, b, '00000000-0000-4000-8000-000000000000', a.shopId).filter((t) => t.kind === 'foreign-key');
  expect(attempts.length).toBe(14);
  for (const t of attempts) {
    const r = await call(b, t.method, t.path, t.body, t.headers);
    expect({ op: t.op, status: r.status, code: r.body?.error?.code }).toEqual({ op: t.op, ...t.expected });
    expect(revealsOrChanges(t, r, A)).toBeUndefined();
  }
  expect(await snapshot(call, a, A)).toEqual(before);
});

it("answers 404 for another shop's ids and 400 for its cursors, under the shop's own key, and changes nothing", async () => {
  const before = await snapshot(call, a, A);
  // B's own lists hold nothing of A's.
  expect((await call(b, 'GET', '/activities/?scope=workspace')).body.results).toEqual([]);
  expect((await call(b, 'GET', '/flows/')).body.results).toEqual([]);
  expect((await call(b, 'GET', '/conversations/export/?created_at__range=relative:-1d,')).body.results).toEqual([]);
  // An event B records with A's contact id as its own identifier stays B's.
  const own = await ownEventWithForeignContact(call, b, A);
  expect(own.problem).toBeUndefined();
  const attempts = crossShopAttempts(doc, A, b, own.contact!, a.shopId).filter((t) => t.kind !== 'foreign-key');
  // A's ids in every operation that takes one (activity, timeline, flow GET/PATCH/DELETE, triggers, deletion job), A's cursors
  // on each list, A's timeline cursor on B's own contact, and B's own lists.
  expect(attempts.filter((t) => t.kind === 'foreign-id').length).toBe(7);
  expect(attempts.filter((t) => t.kind === 'foreign-cursor').length).toBe(Object.keys(A.cursors).length + 1);
  for (const t of attempts) {
    const r = await call(b, t.method, t.path, t.body, t.headers);
    expect({ kind: t.kind, op: t.op, status: r.status, code: r.body?.error?.code }).toEqual({
      kind: t.kind,
      op: t.op,
      status: t.expected.status,
      code: t.expected.code,
    });
    expect(revealsOrChanges(t, r, A)).toBeUndefined();
  }
  expect(await snapshot(call, a, A)).toEqual(before);
});
