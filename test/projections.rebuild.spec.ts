import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '@shopstream/db';
import { conversationsTopic, headers as H, type ConversationRecord } from '@shopstream/contracts';
import { rebuildProjection, RebuildRefusedError, type ProjectionDefinition, type RebuildProgress } from '@shopstream/projections';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { activityProjection, startActivityProjector } from '@shopstream/activity-projector';
import { flowMatcherProjection, startFlowMatcher } from '@shopstream/flow-matcher';
import { conversationProjection, startConversationProjector } from '@shopstream/conversation-projector';
import { startQueryApi } from '@shopstream/query-api';
import { createTestShop, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';
import { conversationWithMessage } from '@shopstream/testkit';

/**
 * `pnpm cli projections rebuild` without downtime, on both buses: a rebuild reproduces every row of every
 * projection, emits nothing, and the HTTP reads of the running services never fail while it runs.
 */
const buses: [string, Record<string, string | undefined>][] = [
  ['Kafka', {}],
  ['the Postgres log', { KAFKA_BROKERS: undefined }],
];

describe.each(buses)('projection rebuilds on %s', (_bus, overrides) => {
  let rt: Runtime;
  let server: TestServer;
  let shop: Awaited<ReturnType<typeof createTestShop>>;
  const flowId = randomUUID();
  // Paused halfway through the events: its triggers stop there, in the live run and in a rebuild.
  const pausedFlowId = randomUUID();
  let beforePause = 0;
  const activityIds = new Set<string>();
  const contactIds = new Set<string>();
  let conversationCount = 0;

  const defs = () => [activityProjection, flowMatcherProjection(rt.env.FLOW_REFRESH_MS), conversationProjection] as ProjectionDefinition<unknown>[];
  const rebuild = (def: ProjectionDefinition<unknown>, onProgress?: (p: RebuildProgress) => void) =>
    rebuildProjection(def, {
      bus: rt.bus,
      db: rt.db,
      logger: rt.logger,
      topics: rt.topics,
      groupPrefix: rt.env.CONSUMER_GROUP_PREFIX,
      onProgress,
      progressIntervalMs: 100,
    });

  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${server.baseUrl}/v2026-04${path}`, { method: 'POST', headers: shop.headers, body: JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as any };
  };

  /** Row count and a checksum over every column of every row of a table, in a fixed order. */
  const checksum = async (table: string) =>
    (await rt.db.query(sql`SELECT count(*)::int AS n, md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) AS sum FROM ${sql.ident(table)} t`))[0];
  const checksums = async (tables: readonly string[]) => Object.fromEntries(await Promise.all(tables.map(async (t) => [t, await checksum(t)])));
  const logEnds = async (topic: string) => (await rt.bus.offsets(topic)).map((p) => p.high);

  /** Events through HTTP: with and without contacts, keyed and unkeyed, replays, half matching the flow. */
  async function sendEvents(n: number, label: string): Promise<string[]> {
    const ids: string[] = [];
    for (let start = 0; start < n; start += 100) {
      const events = Array.from({ length: Math.min(100, n - start) }, (_, j) => {
        const i = start + j;
        return {
          name: `Placed order ${label}-${i}`,
          metric: { metric_name: 'placed_order', value: i, additional_properties: { total: i % 100 } },
          ...(i % 2 === 0 ? { contact: { email: `buyer-${i % 37}@example.com` } } : {}),
          // Every third event keyed; every tenth a replay of the one before it.
          ...(i % 3 === 0 ? { remote_id: `${label}-order-${i % 10 === 9 ? i - 1 : i}`, remote_platform: 'shopify' } : {}),
        };
      });
      const res = await post('/events/bulk/', { events });
      expect(res.status).toBe(200);
      for (const r of res.body.results) {
        expect(r.status).toBe('success');
        ids.push(r.event.activity_id);
        activityIds.add(r.event.activity_id);
        if (r.event.contact) contactIds.add(r.event.contact.id);
      }
    }
    return ids;
  }

  const conversationRecords = (n: number): ConversationRecord[] =>
    Array.from({ length: n }, (_, i) =>
      conversationWithMessage(shop.shopId, { at: new Date(Date.UTC(2026, 0, 2, 0, i)).toISOString(), text: `hello ${i}`, tags: ['t'], type: 'web_chat' }),
    ).flat();

  async function allProjected(): Promise<void> {
    await waitFor(async () => Number((await rt.db.query(sql`SELECT count(*)::int AS n FROM activities`))[0].n) === activityIds.size, {
      timeoutMs: 60_000,
      message: 'every activity projected',
    });
    await waitFor(async () => Number((await rt.db.query(sql`SELECT count(*)::int AS n FROM conversations`))[0].n) === conversationCount, {
      timeoutMs: 60_000,
      message: 'every conversation projected',
    });
    // The matcher has caught up with the metrics topic when its checkpoints reach the log's end.
    await waitFor(
      async () => {
        const ends = await rt.bus.offsets(rt.topics.metrics);
        const at = await rt.db.query(
          sql`SELECT partition, next_offset FROM projection_offsets WHERE group_id = ${`${rt.env.CONSUMER_GROUP_PREFIX}flow-matcher`}`,
        );
        const next = new Map(at.map((r) => [Number(r.partition), String(r.next_offset)]));
        return ends.every((p) => p.high === '0' || next.get(p.partition) === p.high) && (await rt.db.query(sql`SELECT 1 FROM outbox LIMIT 1`)).length === 0;
      },
      { timeoutMs: 60_000, message: 'flow matcher caught up and outbox relayed' },
    );
  }

  beforeAll(async () => {
    rt = await startTestRuntime({ ...overrides, CONSUMER_GROUP_PREFIX: `rebuild-spec-${randomUUID()}.` }, 'rebuild-spec');
    shop = await createTestShop(rt);
    await rt.db.query(sql`
      INSERT INTO flows (shop_id, id, name, status, metric_name, property_conditions)
      VALUES (${shop.shopId}, ${flowId}, 'big orders', 'active', 'placed_order', ${JSON.stringify([{ field: 'total', op: 'gte', value: 50 }])}::jsonb),
             (${shop.shopId}, ${pausedFlowId}, 'every order, for a while', 'active', 'placed_order', '[]'::jsonb)`);
    const services: StartedService[] = [
      await startIngestApi(rt),
      await startQueryApi(rt),
      await startActivityProjector(rt),
      await startFlowMatcher(rt),
      await startConversationProjector(rt),
    ];
    server = await startTestServer(rt, services);

    beforePause = new Set(await sendEvents(1_000, 'first')).size;
    const paused = await fetch(`${server.baseUrl}/v2026-04/flows/${pausedFlowId}/`, {
      method: 'PATCH',
      headers: shop.headers,
      body: JSON.stringify({ status: 'paused' }),
    });
    expect(paused.status).toBe(200);
    await sendEvents(1_000, 'second');
    // A dead letter among them: the live projector sends it to events.dlq, a rebuild skips it.
    await rt.bus.publish(rt.topics.events, [{ key: shop.shopId, value: '{not json', headers: { [H.shopId]: shop.shopId } }]);
    const conversations = conversationRecords(150);
    conversationCount = 150;
    await rt.bus.publish(
      rt.topics.conversations,
      conversations.map((r) => conversationsTopic.record(r)),
    );
    await allProjected();
    const pausedTriggers = await rt.db.query(sql`SELECT count(*)::int AS n FROM flow_triggers WHERE flow_id = ${pausedFlowId}`);
    expect(pausedTriggers[0].n).toBe(beforePause);
  }, 180_000);
  afterAll(async () => {
    await server?.stop();
  });

  /** Polls the reads a rebuild must not interrupt until stopped; returns every status seen. */
  function pollReads(): { stop(): Promise<number[]> } {
    let running = true;
    const statuses: number[] = [];
    const ids = [...activityIds];
    const contacts = [...contactIds];
    const loop = (async () => {
      let lastExport = 0;
      for (let i = 0; running; i++) {
        const urls = [
          `/activities/${ids[i % ids.length]}/`,
          `/contacts/${contacts[i % contacts.length]}/timeline/?limit=5`,
          `/flows/${flowId}/triggers/?limit=5`,
        ];
        // The export is rate limited (60 a minute): once every 2 s.
        if (Date.now() - lastExport > 2_000) {
          urls.push('/conversations/export/?created_at__range=2026-01-01T00:00:00Z,2026-01-20T00:00:00Z&limit=10');
          lastExport = Date.now();
        }
        const got = await Promise.all(urls.map(async (u) => (await fetch(`${server.baseUrl}/v2026-04${u}`, { headers: shop.headers })).status));
        statuses.push(...got);
      }
    })();
    return {
      async stop() {
        running = false;
        await loop;
        return statuses;
      },
    };
  }

  it('rebuilds every projection row for row, emits nothing again, and reads never fail meanwhile', async () => {
    for (const def of defs()) {
      const before = await checksums(def.tables);
      const metricsEnd = await logEnds(rt.topics.metrics);
      const triggersEnd = await logEnds(rt.topics.flowTriggers);
      const reads = pollReads();
      const progress: RebuildProgress[] = [];
      const result = await rebuild(def, (p) => progress.push(p));
      const statuses = await reads.stop();

      expect(statuses.length).toBeGreaterThan(0);
      expect(statuses.filter((s) => s !== 200)).toEqual([]);
      expect(await checksums(def.tables)).toEqual(before);
      expect(result.applied).toBeGreaterThan(0);
      expect(progress.at(-1)?.phase).toBe('switched');
      if (def.name === 'activity-projector') expect(result.rejected).toBe(1);
      // No metric event or flow trigger was published again.
      expect(await logEnds(rt.topics.metrics)).toEqual(metricsEnd);
      expect(await logEnds(rt.topics.flowTriggers)).toEqual(triggersEnd);
      // The old generation is dropped, the rebuild's group and checkpoints are gone.
      const schemas = await rt.db.query(sql`SELECT nspname FROM pg_namespace WHERE nspname LIKE 'rebuild\\_%' OR nspname LIKE 'retired\\_%'`);
      expect(schemas).toEqual([]);
      expect(await rt.db.query(sql`SELECT group_id FROM projection_offsets WHERE group_id LIKE '%.rebuild.%'`)).toEqual([]);
      const row = await rt.db.query(sql`SELECT status, applied FROM projection_rebuilds WHERE id = ${result.id}`);
      expect(row).toEqual([{ status: 'switched', applied: String(result.applied) }]);
    }
    // The live projectors carry on with the new tables.
    const more = await sendEvents(100, 'after');
    await allProjected();
    for (const id of more) {
      const res = await fetch(`${server.baseUrl}/v2026-04/activities/${id}/`, { headers: shop.headers });
      expect(res.status).toBe(200);
    }
  }, 240_000);

  it('loses nothing accepted while events keep arriving during a rebuild', async () => {
    let sending = true;
    const accepted: string[] = [];
    const producer = (async () => {
      for (let i = 0; sending; i++) {
        const res = await post('/events/', {
          name: `During ${i}`,
          metric: { metric_name: 'placed_order', value: i, additional_properties: { total: 75 } },
          ...(i % 2 ? { contact: { email: `during-${i % 5}@example.com` } } : {}),
        });
        expect(res.status).toBe(202);
        accepted.push(res.body.activity_id);
        activityIds.add(res.body.activity_id);
      }
    })();
    let result: Awaited<ReturnType<typeof rebuild>>;
    try {
      // Let some arrive before the rebuild starts, and keep them coming until after it switched.
      await waitFor(() => accepted.length >= 50, { timeoutMs: 30_000, message: 'events flowing' });
      result = await rebuild(activityProjection as ProjectionDefinition<unknown>);
      const atSwitch = accepted.length;
      await waitFor(() => accepted.length >= atSwitch + 20, { timeoutMs: 30_000, message: 'events after the switch' });
    } finally {
      sending = false;
      await producer;
    }
    expect(result.applied).toBeGreaterThan(2_000);
    await allProjected();
    const rows = await rt.db.query(sql`SELECT id FROM activities WHERE id = ANY(${accepted}::uuid[])`);
    expect(rows.length).toBe(new Set(accepted).size);
    // Each accepted event emitted exactly one metric event and the flow matched each once.
    const triggers = await rt.db.query(sql`SELECT count(*)::int AS n FROM flow_triggers WHERE activity_id = ANY(${accepted}::uuid[])`);
    expect(triggers[0].n).toBe(new Set(accepted).size);
  }, 180_000);

  it('switches only once a long read of the live tables let go, and then completes', async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    // A read that keeps its transaction (and its lock on the table) open, as a slow export page would.
    const reader = rt.db.tx(async (tx) => {
      await tx.query(sql`SELECT count(*) FROM activities`);
      await held;
    });
    let attempts = 0;
    const rebuilding = rebuild(activityProjection as ProjectionDefinition<unknown>, (p) => {
      if (p.phase === 'switching' && ++attempts === 2) release();
    });
    const result = await rebuilding;
    await reader;
    // The first attempt gave up on its lock; the one after the read ended switched.
    expect(attempts).toBeGreaterThanOrEqual(2);
    expect((await rt.db.query(sql`SELECT status FROM projection_rebuilds WHERE id = ${result.id}`))[0].status).toBe('switched');
  }, 60_000);

  it('refuses a second rebuild of a projection while one runs, and changes nothing', async () => {
    const id = randomUUID();
    await rt.db.query(sql`
      INSERT INTO projection_rebuilds (id, projection, version, build_schema, group_id, status)
      VALUES (${id}, 'activity-projector', 2, 'rebuild_elsewhere', 'elsewhere', 'running')`);
    const before = await checksums(activityProjection.tables);
    await expect(rebuild(activityProjection as ProjectionDefinition<unknown>)).rejects.toThrow(RebuildRefusedError);
    await expect(rebuild(activityProjection as ProjectionDefinition<unknown>)).rejects.toThrow(/Another rebuild of activity-projector is running/);
    expect(await checksums(activityProjection.tables)).toEqual(before);
    // Its process died: once the heartbeat is stale, a new rebuild takes over and marks it abandoned.
    await rt.db.query(sql`UPDATE projection_rebuilds SET heartbeat_at = now() - interval '1 minute' WHERE id = ${id}`);
    // --keep-old: the old generation stays, whole, in the schema the result names.
    const convBefore = await checksums(conversationProjection.tables);
    const kept = await rebuildProjection(conversationProjection as ProjectionDefinition<unknown>, {
      bus: rt.bus,
      db: rt.db,
      logger: rt.logger,
      topics: rt.topics,
      groupPrefix: rt.env.CONSUMER_GROUP_PREFIX,
      keepOld: true,
    });
    expect(kept.keptSchema).toMatch(/^retired_conversation_projector_/);
    const old = await rt.db.query(sql`SELECT count(*)::int AS n FROM ${sql.ident(kept.keptSchema!, 'conversations')}`);
    expect(old[0].n).toBe(convBefore.conversations.n);
    expect(await checksums(conversationProjection.tables)).toEqual(convBefore);
    await rt.db.query(sql`DROP SCHEMA ${sql.ident(kept.keptSchema!)} CASCADE`);
    await rebuild(activityProjection as ProjectionDefinition<unknown>);
    expect((await rt.db.query(sql`SELECT status FROM projection_rebuilds WHERE id = ${id}`))[0].status).toBe('abandoned');
  }, 120_000);

  it('refuses to rebuild from a log that no longer starts at offset 0, and changes nothing', async () => {
    const topic = rt.topics.conversations;
    const partition = (await rt.bus.offsets(topic)).find((p) => p.high !== '0')!.partition;
    if (rt.env.KAFKA_BROKERS) {
      const { Kafka } = await import('kafkajs');
      const admin = new Kafka({ brokers: rt.env.KAFKA_BROKERS!, logLevel: 0 }).admin();
      await admin.connect();
      await admin.fetchTopicMetadata({ topics: [topic] });
      await admin.deleteTopicRecords({ topic, partitions: [{ partition, offset: '1' }] });
      await admin.disconnect();
    } else {
      await rt.db.query(sql`DELETE FROM bus_records WHERE topic = ${topic} AND partition = ${partition} AND "offset" < 1`);
    }
    const before = await checksums(conversationProjection.tables);
    const started = await rt.db.query(sql`SELECT count(*)::int AS n FROM projection_rebuilds`);
    await expect(rebuild(conversationProjection as ProjectionDefinition<unknown>)).rejects.toThrow(
      new RegExp(`no longer starts at offset 0 \\(partition ${partition} starts at 1\\)`),
    );
    expect(await checksums(conversationProjection.tables)).toEqual(before);
    expect(await rt.db.query(sql`SELECT count(*)::int AS n FROM projection_rebuilds`)).toEqual(started);
  }, 60_000);
});
