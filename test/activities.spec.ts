import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '@shopstream/db';
import { headers as H, metricEventSchema, schemas } from '@shopstream/contracts';
import type { Runtime, StartedService } from '@shopstream/runtime';
import type { BusRecord } from '@shopstream/bus';
import { startIngestApi } from '@shopstream/ingest-api';
import { startActivityProjector } from '@shopstream/activity-projector';
import { startQueryApi } from '@shopstream/query-api';
import { createTestShop, json, readTopic, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';

/**
 * Black box: events go in over HTTP (ingest-api), the activity projector runs on the real broker and
 * database, and Activities and timelines come out over HTTP (query-api) and metric events on `metrics`.
 */
let rt: Runtime;
let services: StartedService[];
let server: TestServer;
let shop: Awaited<ReturnType<typeof createTestShop>>;
let other: Awaited<ReturnType<typeof createTestShop>>;

beforeAll(async () => {
  // Consumer groups of their own: a group shared with other spec files would rebalance with theirs.
  rt = await startTestRuntime({ CONSUMER_GROUP_PREFIX: `activities-spec-${randomUUID()}.` }, 'activities-spec');
  services = [await startActivityProjector(rt), await startIngestApi(rt), await startQueryApi(rt)];
  server = await startTestServer(rt, services);
  shop = await createTestShop(rt);
  other = await createTestShop(rt);
});
afterAll(async () => {
  await server?.stop();
});

const post = async (path: string, body: unknown, headers = shop.headers) => {
  const res = await fetch(`${server.baseUrl}/v2026-04${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as any };
};
const get = async (path: string, headers = shop.headers) => {
  const res = await fetch(path.startsWith('http') ? path : `${server.baseUrl}/v2026-04${path}`, { headers });
  return { status: res.status, body: (await res.json()) as any };
};
/** The records at distinct log positions: a reader may be handed a batch again before its commit lands. */
const distinct = (rs: BusRecord[]) => [...new Map(rs.map((r) => [`${r.partition}/${r.offset}`, r])).values()];
const activityVisible = (id: string, headers = shop.headers) =>
  waitFor(async () => ((await get(`/activities/${id}/`, headers)).status === 200 ? true : null), { message: `activity ${id}` });

describe('activities and timelines', () => {
  it('an event with a contact becomes an Activity that heads the contact timeline', async () => {
    const email = `ada-${randomUUID()}@example.com`;
    const first = await post('/events/', {
      name: 'Viewed product',
      metric: { metric_name: 'viewed_product', value: 1, additional_properties: { sku: 'A-1' } },
      contact: { email, name: 'Ada' },
      event_time: '2026-03-01T10:00:00Z',
    });
    expect(first.status).toBe(202);
    const second = await post('/events/', {
      name: 'Placed order',
      description: 'Order #1001',
      metric: { metric_name: 'placed_order', value: 42.5, additional_properties: { total: 42.5, items: [{ sku: 'A-1' }] } },
      contact: { email },
      event_time: '2026-03-01T11:00:00+01:00',
      remote_id: `order-${randomUUID()}`,
      remote_platform: 'shopify',
    });
    expect(second.status).toBe(202);
    const contactId: string = second.body.contact.id;
    expect(first.body.contact.id).toBe(contactId);
    await activityVisible(second.body.activity_id);

    const { status, body: activity } = await get(`/activities/${second.body.activity_id}/`);
    expect(status).toBe(200);
    expect(activity).toMatchObject({
      id: second.body.activity_id,
      name: 'Placed order',
      description: 'Order #1001',
      event_time: '2026-03-01T10:00:00.000Z',
      metric: { metric_name: 'placed_order', value: 42.5, additional_properties: { total: 42.5, items: [{ sku: 'A-1' }] } },
      contact: { id: contactId, email, name: 'Ada' },
      remote_platform: 'shopify',
    });
    expect(Date.parse(activity.recorded_at)).not.toBeNaN();

    await activityVisible(first.body.activity_id);
    // Both happened at 10:00Z; the order was sent later but the same instant: ties go by id, so compare sets,
    // then check that a newer event heads the timeline.
    const later = await post('/events/', {
      name: 'Opened email',
      metric: { metric_name: 'opened_email' },
      contact: { email },
      event_time: '2026-03-02T09:00:00Z',
    });
    await activityVisible(later.body.activity_id);
    const timeline = await get(`/contacts/${contactId}/timeline/`);
    expect(timeline.status).toBe(200);
    expect(timeline.body.results.map((a: any) => a.id)[0]).toBe(later.body.activity_id);
    expect(new Set(timeline.body.results.map((a: any) => a.id))).toEqual(new Set([later.body.activity_id, first.body.activity_id, second.body.activity_id]));
    expect(timeline.body.next).toBeNull();
    expect(timeline.body.previous).toBeNull();

    // Pages of one, forward then back.
    const p1 = await get(`/contacts/${contactId}/timeline/?limit=1`);
    expect(p1.body.results.map((a: any) => a.id)).toEqual([later.body.activity_id]);
    expect(p1.body.previous).toBeNull();
    expect(p1.body.next).toMatch(new RegExp(`^${server.baseUrl}/v2026-04/contacts/${contactId}/timeline/\\?limit=1&cursor=`));
    const p2 = await get(p1.body.next);
    const p3 = await get(p2.body.next);
    expect(p3.body.next).toBeNull();
    const ids = [p1, p2, p3].map((p) => p.body.results[0].id);
    expect(ids).toEqual(timeline.body.results.map((a: any) => a.id));
    const back = await get(p3.body.previous);
    expect(back.body.results.map((a: any) => a.id)).toEqual([ids[1]]);

    // Another shop sees neither the Activity nor the timeline.
    expect((await get(`/activities/${second.body.activity_id}/`, other.headers)).status).toBe(404);
    expect((await get(`/contacts/${contactId}/timeline/`, other.headers)).body.error.code).toBe('not_found');
  });

  it('an event without a contact belongs to the workspace and to no timeline', async () => {
    const a = await post('/events/', { name: 'Deployed', metric: { metric_name: 'deployed' } });
    const b = await post('/events/', { name: 'Deployed again', metric: { metric_name: 'deployed' } });
    expect(a.status).toBe(202);
    expect(a.body.contact).toBeUndefined();
    await activityVisible(a.body.activity_id);
    await activityVisible(b.body.activity_id);
    const page = await get('/activities/?scope=workspace');
    expect(page.status).toBe(200);
    const ids = page.body.results.map((x: any) => x.id);
    expect(ids).toContain(a.body.activity_id);
    expect(ids).toContain(b.body.activity_id);
    expect(page.body.results.every((x: any) => x.contact === null)).toBe(true);
    const onTimeline = await rt.db.query(
      sql`SELECT count(*)::int AS n FROM contact_timeline WHERE shop_id = ${shop.shopId} AND activity_id IN (${a.body.activity_id}, ${b.body.activity_id})`,
    );
    expect(onTimeline[0].n).toBe(0);
    // The other shop's workspace does not hold them.
    expect((await get('/activities/?scope=workspace', other.headers)).body.results).toEqual([]);
  });

  it('validates the listing: scope is required, limit 1..100, cursors are tamper-proof', async () => {
    const noScope = await get('/activities/');
    expect(noScope.status).toBe(400);
    expect(noScope.body.error.code).toBe('validation_error');
    expect(Object.keys(noScope.body.error.fields)).toEqual(['scope']);
    expect((await get('/activities/?scope=workspace&limit=0')).body.error.fields).toHaveProperty('limit');
    expect((await get('/activities/?scope=workspace&limit=101')).status).toBe(400);
    expect((await get('/activities/?scope=workspace&bogus=1')).body.error.fields).toHaveProperty('bogus');
    const bad = await get('/activities/?scope=workspace&cursor=abc.def');
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_cursor');
    expect((await get('/activities/not-a-uuid/')).status).toBe(404);
  });

  it('a replay creates no second Activity, timeline entry or metric event', async () => {
    const remote = `order-${randomUUID()}`;
    const event = {
      name: 'Placed order',
      metric: { metric_name: 'placed_order', value: 10 },
      contact: { email: `r-${randomUUID()}@example.com` },
      remote_id: remote,
      remote_platform: 'shopify',
    };
    const a = await post('/events/', event);
    const b = await post('/events/', { ...event, name: 'Placed order (retried)' });
    expect(b.body.activity_id).toBe(a.body.activity_id);
    await activityVisible(a.body.activity_id);
    // A later event of the same shop: once its metric event is on the topic, anything the replay emitted
    // would be too (same key, same partition, log order).
    const marker = await post('/events/', { name: 'Marker', metric: { metric_name: 'marker' } });
    const records = await readTopic(rt, rt.topics.metrics, (rs) => rs.some((r) => json(r).id === marker.body.activity_id));
    const forActivity = distinct(records).filter((r) => json(r).id === a.body.activity_id);
    expect(forActivity).toHaveLength(1);
    const rows = await rt.db.query(sql`SELECT name FROM activities WHERE shop_id = ${shop.shopId} AND id = ${a.body.activity_id}`);
    expect(rows).toEqual([{ name: 'Placed order' }]);
    const tl = await rt.db.query(sql`SELECT count(*)::int AS n FROM contact_timeline WHERE shop_id = ${shop.shopId} AND activity_id = ${a.body.activity_id}`);
    expect(tl[0].n).toBe(1);
  });

  it('each new Activity emits one metric event keyed by shop, with the documented headers and value', async () => {
    const email = `m-${randomUUID()}@example.com`;
    const e = await post('/events/', {
      name: 'Started checkout',
      metric: { metric_name: 'started_checkout', value: 3, additional_properties: { cart: { total: 99 } }, deduping_key: `k-${randomUUID()}` },
      contact: { email, phone: '+14155550123' },
      event_time: '2026-03-03T08:00:00Z',
    });
    const records = await readTopic(rt, rt.topics.metrics, (rs) => rs.some((r) => json(r).id === e.body.activity_id));
    const r = records.find((x) => json(x).id === e.body.activity_id)!;
    expect(r.key).toBe(shop.shopId);
    expect(r.headers).toMatchObject({
      [H.contentType]: 'application/json',
      [H.schema]: schemas.metricEvent,
      [H.shopId]: shop.shopId,
      [H.metricName]: 'started_checkout',
    });
    const value = metricEventSchema.parse(json(r));
    expect(value).toMatchObject({
      id: e.body.activity_id,
      activity_id: e.body.activity_id,
      shop_id: shop.shopId,
      metric_name: 'started_checkout',
      value: 3,
      additional_properties: { cart: { total: 99 } },
      name: 'Started checkout',
      description: null,
      event_time: '2026-03-03T08:00:00Z',
      contact: { id: e.body.contact.id, email, phone: '+14155550123' },
      remote_id: null,
      remote_platform: null,
    });
    const stored = await get(`/activities/${e.body.activity_id}/`);
    expect(new Date(value.recorded_at).toISOString()).toBe(stored.body.recorded_at);
    const left = await rt.db.query(sql`SELECT count(*)::int AS n FROM outbox WHERE topic = ${rt.topics.metrics} AND key = ${shop.shopId}`);
    expect(left[0].n).toBe(0);
  });
});
