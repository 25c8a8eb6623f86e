import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShopstreamClient, ShopstreamError, type EventInput } from '@shopstream/client';
import { conversationsTopic } from '@shopstream/contracts';
import { sql } from '@shopstream/db';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startQueryApi } from '@shopstream/query-api';
import { startActivityProjector } from '@shopstream/activity-projector';
import { startConversationProjector } from '@shopstream/conversation-projector';
import { createTestShop, servicesOnOwnPostgres, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';
import { conversationUpserted } from '@shopstream/testkit';

/**
 * @shopstream/client against the real server: what it sends is counted through a fetch that wraps the real
 * one (every request still goes to the server), so splitting and retries are seen as requests.
 */
function countingFetch() {
  const calls: { method: string; url: string; status: number }[] = [];
  const f: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    calls.push({ method: init?.method ?? 'GET', url: String(input), status: res.status });
    return res;
  };
  return { fetch: f, calls };
}

describe('on Kafka and PostgreSQL', () => {
  let rt: Runtime;
  let server: TestServer;
  beforeAll(async () => {
    rt = await startTestRuntime({ EXPORT_RATE_LIMIT_PER_MINUTE: '2' }, 'client');
    server = await startTestServer(rt, [
      await startIngestApi(rt),
      await startQueryApi(rt),
      await startActivityProjector(rt),
      await startConversationProjector(rt),
    ]);
  });
  afterAll(async () => {
    await server?.stop();
    await rt?.close();
  });
  const client = async (extra: Partial<ConstructorParameters<typeof ShopstreamClient>[0]> = {}) => {
    const shop = await createTestShop(rt);
    const counted = countingFetch();
    return {
      shop,
      calls: counted.calls,
      c: new ShopstreamClient({ baseUrl: server.baseUrl, apiKey: shop.key, shopId: shop.shopId, fetch: counted.fetch, ...extra }),
    };
  };

  it('records an event and reads it back; a replay keeps one activity id', async () => {
    const { c } = await client();
    const event: EventInput = {
      name: 'Placed order',
      metric: { metric_name: 'placed_order', value: 10 },
      contact: { email: 'ada@example.com' },
      remote_id: 'o-1',
      remote_platform: 'shop',
    };
    const first = await c.recordEvent(event);
    const again = await c.recordEvent(event);
    expect(again.activity_id).toBe(first.activity_id);
    const activity = await waitFor(() => c.getActivity(first.activity_id).catch(() => undefined), { message: 'the activity' });
    expect(activity.contact?.email).toBe('ada@example.com');
    const timeline = [];
    for await (const a of c.contactTimeline(first.contact!.id, { limit: 1 })) timeline.push(a.id);
    expect(timeline).toEqual([first.activity_id]);
  });

  it('recordEvents splits 250 events into 3 requests and answers one result per event, in input order', async () => {
    const { c, calls } = await client();
    const events: EventInput[] = Array.from({ length: 250 }, (_, i) => ({ name: `e${i}`, metric: { metric_name: 'viewed', value: i } }));
    events[120] = { name: '', metric: { metric_name: 'viewed' } };
    const results = await c.recordEvents(events);
    expect(calls.map((x) => `${x.method} ${new URL(x.url).pathname} ${x.status}`)).toEqual(Array(3).fill('POST /v2026-04/events/bulk/ 200'));
    expect(results.map((r) => r.index)).toEqual(events.map((_, i) => i));
    expect(results.filter((r) => r.status === 'error').map((r) => r.index)).toEqual([120]);
    const ids = results.flatMap((r) => (r.status === 'success' ? [r.event.activity_id] : []));
    expect(new Set(ids).size).toBe(249);
  });

  it('a response lost after the server recorded the event: the retry replays it, one activity not two', async () => {
    const { c: direct, shop } = await client();
    // A TCP proxy in front of the server that drops the first answer (closes the client's socket as the answer
    // arrives, after the server has written the record) and passes everything else.
    let connections = 0;
    let dropNext = true;
    const sockets = new Set<net.Socket>();
    const proxy = net.createServer((downstream) => {
      connections++;
      const upstream = net.connect(Number(new URL(server.baseUrl).port), '127.0.0.1');
      sockets.add(downstream).add(upstream);
      downstream.pipe(upstream);
      upstream.on('data', (chunk: Buffer) => {
        if (!dropNext) return void downstream.write(chunk);
        dropNext = false;
        downstream.destroy();
        upstream.destroy();
      });
      downstream.on('error', () => upstream.destroy());
      upstream.on('error', () => downstream.destroy());
      downstream.on('close', () => upstream.destroy());
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    try {
      const port = (proxy.address() as net.AddressInfo).port;
      const counted = countingFetch();
      const c = new ShopstreamClient({ baseUrl: `http://127.0.0.1:${port}`, apiKey: shop.key, shopId: shop.shopId, fetch: counted.fetch, minBackoffMs: 1 });
      const accepted = await c.recordEvent({ name: 'Lost answer', metric: { metric_name: 'lost_answer', value: 1 } });
      expect(connections).toBe(2);
      expect(counted.calls.map((x) => x.status)).toEqual([202]);
      dropNext = true;
      const bulk = await c.recordEvents([{ name: 'Lost answer', metric: { metric_name: 'lost_answer_bulk', value: 2 } }]);
      expect(bulk.map((r) => r.status)).toEqual(['success']);
      expect(dropNext).toBe(false);
      expect(counted.calls.map((x) => x.status)).toEqual([202, 200]);
      // Records of a shop are consumed in order: once this later one is projected, both attempts were too.
      const sentinel = await direct.recordEvent({ name: 'after', metric: { metric_name: 'sentinel' } });
      await waitFor(() => direct.getActivity(sentinel.activity_id).catch(() => undefined), { message: 'the sentinel projected' });
      const rows = await rt.db.query(sql`SELECT id, metric->>'deduping_key' AS key FROM activities WHERE shop_id = ${shop.shopId} AND name = 'Lost answer'`);
      expect(rows.map((r) => r.id).sort()).toEqual([accepted.activity_id, (bulk[0] as { event: { activity_id: string } }).event.activity_id].sort());
      expect(rows.every((r) => typeof r.key === 'string' && r.key.length === 36)).toBe(true);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((r) => proxy.close(r));
    }
  });

  it('never retries a 4xx: one request, and the error body as a ShopstreamError', async () => {
    const { c, calls } = await client();
    const e = await c.recordEvent({ name: 'x', metric: { metric_name: '' } }).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(ShopstreamError);
    expect(e).toMatchObject({ status: 400, code: 'validation_error', fields: { 'metric.metric_name': expect.any(String) } });
    expect(calls).toHaveLength(1);
  });

  it('track() flushes on size, on its interval and on close(), every event once', async () => {
    const { c, calls } = await client({ flushAt: 10, flushIntervalMs: 100 });
    for (let i = 0; i < 25; i++) c.track({ name: `t${i}`, metric: { metric_name: 'tracked', value: i } });
    // 20 went in two size flushes; the last 5 go on the interval, without flush() or close().
    await waitFor(() => calls.length === 3, { message: 'three bulk requests' });
    c.track({ name: 'last', metric: { metric_name: 'tracked', value: 99 } });
    await c.close();
    expect(calls).toHaveLength(4);
    expect(() => c.track({ name: 'late', metric: { metric_name: 'tracked' } })).toThrow(/after close/);
  });

  it('flows: create, list, get, update, delete', async () => {
    const { c } = await client();
    const flow = await c.createFlow({
      name: 'Big orders',
      trigger: { metric_name: 'placed_order', property_conditions: [{ field: 'total', op: 'gte', value: 100 }] },
    });
    expect((await c.updateFlow(flow.id, { status: 'paused' })).status).toBe('paused');
    const listed = [];
    for await (const f of c.listFlows()) listed.push(f.id);
    expect(listed).toEqual([flow.id]);
    expect((await c.getFlow(flow.id)).name).toBe('Big orders');
    await c.deleteFlow(flow.id);
    await expect(c.getFlow(flow.id)).rejects.toMatchObject({ status: 404, code: 'not_found' });
  });

  it("walks an export page by page until the API's rate limit answers 429, which the client gives as rate_limited", async () => {
    // No retries: waiting a 429 out (up to the rest of the minute's window here) is client.unit.spec.ts's, against
    // a local server answering as the API does; this one checks that the API's own 429 is what the client reads.
    const { c, shop, calls } = await client({ retries: 0 });
    const ids = Array.from({ length: 3 }, () => randomUUID());
    const at = (i: number) => new Date(Date.now() - (10 - i) * 60_000).toISOString();
    const records = ids.map((id, i) => conversationUpserted(shop.shopId, { id, created_at: at(i) }));
    await rt.bus.publish(
      rt.topics.conversations,
      records.map((r) => conversationsTopic.record(r)),
    );
    const seen: string[] = [];
    await waitFor(async () => (await rt.db.query(sql`SELECT count(*)::int AS n FROM conversations WHERE shop_id = ${shop.shopId}`))[0].n === 3, {
      message: 'conversations projected',
      timeoutMs: 30_000,
    });
    // 2 requests a minute: the walk of 3 pages of 1 meets a 429 on the third.
    const walk = async () => {
      for await (const conv of c.exportConversations({ created_at__range: 'relative:-1d,', limit: 1 })) seen.push(conv.id);
    };
    await expect(walk()).rejects.toMatchObject({ status: 429, code: 'rate_limited' });
    expect(seen).toEqual(ids.slice(0, 2));
    expect(calls.map((x) => x.status)).toEqual([200, 200, 429]);
  });
});

describe('through an outage of the log', () => {
  const outage = servicesOnOwnPostgres('client-outage');
  afterAll(() => outage.close());

  it('retries a 503 after its Retry-After until the event is taken', async () => {
    // The Postgres-log bus on a PostgreSQL of the test's own: stopping it makes ingest answer 503 with Retry-After.
    const { rt, server } = await outage.start({ KAFKA_BROKERS: '' }, async (rt) => [await startIngestApi(rt)]);
    const shop = await createTestShop(rt);
    const counted = countingFetch();
    const c = new ShopstreamClient({ baseUrl: server.baseUrl, apiKey: shop.key, shopId: shop.shopId, fetch: counted.fetch, retries: 10 });
    expect((await c.recordEvent({ name: 'before', metric: { metric_name: 'm' } })).activity_id).toBeTruthy();
    await outage.stopPostgres();
    const during = c.recordEvent({ name: 'during', metric: { metric_name: 'm' }, remote_id: 'during-1', remote_platform: 'test' });
    await waitFor(() => counted.calls.some((x) => x.status === 503), { message: 'a 503 while the log is down', timeoutMs: 30_000 });
    await outage.startPostgres();
    const accepted = await during;
    expect(accepted.activity_id).toBeTruthy();
    expect(counted.calls.map((x) => x.status)).toEqual([202, ...counted.calls.slice(1, -1).map(() => 503), 202]);
  }, 120_000);
});
