import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { queryRows, sql } from '@shopstream/db';
import { eventsTopic, metricsTopic, type EventRecord, type MetricEvent } from '@shopstream/contracts';
import type { BusRecord } from '@shopstream/bus';
import type { Runtime } from '@shopstream/runtime';
import { json, readTopic, startTestRuntime, waitFor } from '@shopstream/harness';

/**
 * Crash safety of the two consumers: each runs as its own process (the service's real main.ts), is killed
 * with SIGKILL in the middle of a stream, and started again. Effects must be exactly once in Postgres and
 * at least once, with stable ids, on the topics they emit to.
 */
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const distinct = (rs: BusRecord[]) => [...new Map(rs.map((r) => [`${r.partition}/${r.offset}`, r])).values()];

function startService(rt: Runtime, main: string): { child: ChildProcess; exited: Promise<number | null> } {
  const child = spawn(process.execPath, ['--conditions=@shopstream/source', '--import', 'tsx', path.join(root, main)], {
    cwd: root,
    env: {
      ...process.env,
      DATABASE_URL: rt.env.DATABASE_URL,
      KAFKA_BROKERS: rt.env.KAFKA_BROKERS!.join(','),
      TOPIC_PREFIX: rt.env.TOPIC_PREFIX,
      KAFKA_PARTITIONS: String(rt.env.KAFKA_PARTITIONS),
      CONSUMER_GROUP_PREFIX: rt.env.CONSUMER_GROUP_PREFIX,
      FLOW_REFRESH_MS: '500',
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exited };
}

const count = async (rt: Runtime, q: ReturnType<typeof sql>) => Number((await rt.db.query(q))[0].n);

/** Publishes records in small chunks, as a live stream would arrive, while the test does other things. */
async function stream(rt: Runtime, topic: string, records: { key: string; value: string; headers: Record<string, string> }[], chunk = 150) {
  for (let i = 0; i < records.length; i += chunk) {
    await rt.bus.publish(topic, records.slice(i, i + chunk));
    await new Promise((r) => setTimeout(r, 15));
  }
}

/**
 * A stream cut in two: the first half is published while the first process runs, the second only after it was
 * killed, so the kill lands mid-stream however fast this machine lets that process catch up with the first half.
 */
function halves<T>(records: T[]): [T[], T[]] {
  const mid = Math.floor(records.length / 2);
  return [records.slice(0, mid), records.slice(mid)];
}

let rt: Runtime;
beforeAll(async () => {
  // Consumer groups of their own: a group shared with other spec files would rebalance with theirs.
  rt = await startTestRuntime({ CONSUMER_GROUP_PREFIX: `crash-spec-${randomUUID()}.` }, 'crash-spec');
});
afterAll(async () => {
  await rt?.close();
});

describe('activity projector killed mid-stream', () => {
  it('every event has exactly one Activity and timeline entry, and at least one metric event with its own id', { timeout: 480_000 }, async () => {
    const shops = Array.from({ length: 4 }, () => randomUUID());
    const contacts = shops.map((shop) =>
      Array.from({ length: 5 }, (_, k) => ({ id: randomUUID(), email: `c${k}-${shop.slice(0, 8)}@example.com`, phone: null, remote_id: null, name: null })),
    );
    const events: EventRecord[] = [];
    for (let i = 0; i < 3000; i++) {
      const s = i % shops.length;
      // Every tenth record replays an earlier activity of its shop, with another name: the first one wins.
      const replayOf = i >= 100 && i % 10 === 0 ? events[i - 40] : null;
      events.push({
        activity_id: replayOf ? replayOf.activity_id : randomUUID(),
        shop_id: shops[s],
        activity_key: replayOf ? replayOf.activity_key : `k${i}`,
        name: `Event ${i}`,
        description: null,
        event_time: new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString(),
        received_at: new Date().toISOString(),
        remote_id: null,
        remote_platform: null,
        metric: {
          metric_name: 'crash_test',
          value: i,
          additional_properties: { i },
          context_object_id: null,
          context_object_type: null,
          metric_object_id: null,
          metric_object_type: null,
          deduping_key: null,
        },
        contact: replayOf ? replayOf.contact : i % 3 === 0 ? null : contacts[s][i % 5],
        request_id: `req-${i}`,
      });
    }
    const first = new Map<string, EventRecord>();
    for (const e of events) if (!first.has(e.activity_id)) first.set(e.activity_id, e);
    const ids = [...first.keys()];
    const withContact = [...first.values()].filter((e) => e.contact !== null).length;

    const one = startService(rt, 'services/activity-projector/src/main.ts');
    const [before, after] = halves(events.map((e) => eventsTopic.record(e)));
    const publishing = stream(rt, rt.topics.events, before);
    await waitFor(async () => (await count(rt, sql`SELECT count(*) AS n FROM activities`)) >= 500, {
      timeoutMs: 120_000,
      message: 'the first process projects some events',
    });
    one.child.kill('SIGKILL');
    expect(await one.exited).toBeNull();
    await publishing;
    await stream(rt, rt.topics.events, after);
    const atCrash = await count(rt, sql`SELECT count(*) AS n FROM activities`);
    // The kill landed mid-stream: work was left for the next process.
    expect(atCrash).toBeLessThan(ids.length);

    const two = startService(rt, 'services/activity-projector/src/main.ts');
    let leftBehind = '';
    try {
      await waitFor(async () => (await count(rt, sql`SELECT count(*) AS n FROM activities`)) === ids.length, {
        timeoutMs: 150_000,
        intervalMs: 250,
        message: 'every activity after the restart',
      });
      await waitFor(async () => (await count(rt, sql`SELECT count(*) AS n FROM outbox WHERE topic = ${rt.topics.metrics}`)) === 0, {
        timeoutMs: 30_000,
        message: 'the outbox drained',
      });
      // A crash between a commit and its publish leaves the outbox row behind: put one back, as such a crash
      // would, for an activity whose metric event is on the log. The running process publishes it again on
      // its timer, without new traffic: the same metric event twice, same id.
      leftBehind = ids[0];
      const copy = distinct(await readTopic(rt, rt.topics.metrics, (rs) => rs.some((r) => json(r).id === leftBehind), 60_000)).find(
        (r) => json(r).id === leftBehind,
      )!;
      await rt.db.query(
        sql`INSERT INTO outbox (topic, key, value, headers) VALUES (${rt.topics.metrics}, ${copy.key}, ${copy.value.toString('utf8')}, ${JSON.stringify(copy.headers)}::jsonb)`,
      );
      await waitFor(async () => (await count(rt, sql`SELECT count(*) AS n FROM outbox WHERE topic = ${rt.topics.metrics}`)) === 0, {
        timeoutMs: 30_000,
        message: 'the left-behind row published',
      });
    } finally {
      two.child.kill('SIGTERM');
      expect(await two.exited).toBe(0);
    }

    const rows = await queryRows(rt.db, sql`SELECT id, name, contact_id FROM activities WHERE shop_id = ANY(${shops}::uuid[])`, (r) => ({
      id: String(r.id),
      name: r.name,
      contact_id: r.contact_id,
    }));
    expect(rows).toHaveLength(ids.length);
    for (const r of rows) {
      expect(r.name).toBe(first.get(r.id)!.name);
      expect(r.contact_id).toBe(first.get(r.id)!.contact?.id ?? null);
    }
    const timeline = await queryRows(rt.db, sql`SELECT activity_id, contact_id FROM contact_timeline WHERE shop_id = ANY(${shops}::uuid[])`, (r) => ({
      activity_id: String(r.activity_id),
      contact_id: r.contact_id,
    }));
    expect(timeline).toHaveLength(withContact);
    for (const t of timeline) expect(t.contact_id).toBe(first.get(t.activity_id)!.contact!.id);

    const metrics = distinct(await readTopic(rt, rt.topics.metrics, (rs) => new Set(rs.map((r) => json(r).activity_id)).size >= ids.length, 60_000));
    const byActivity = new Map<string, MetricEvent[]>();
    for (const r of metrics) {
      const m = json(r) as MetricEvent;
      byActivity.set(m.activity_id, [...(byActivity.get(m.activity_id) ?? []), m]);
    }
    expect(new Set(byActivity.keys())).toEqual(new Set(ids));
    for (const [activityId, copies] of byActivity) {
      // A repeat after a crash is the same metric event: same id, same value.
      expect(new Set(copies.map((c) => c.id))).toEqual(new Set([activityId]));
      expect(new Set(copies.map((c) => JSON.stringify(c))).size).toBe(1);
      expect(copies[0].name).toBe(first.get(activityId)!.name);
    }
    expect(byActivity.get(leftBehind)!.length).toBeGreaterThanOrEqual(2);
    console.log(`projector crash: ${atCrash}/${ids.length} activities at the kill; ${metrics.length} metric records for ${ids.length} activities`);
  });
});

describe('flow matcher killed mid-stream', () => {
  it('exactly one trigger per (flow, metric event), each published with its one id', { timeout: 480_000 }, async () => {
    const shop = randomUUID();
    const all = randomUUID();
    const even = randomUUID();
    await rt.db.query(sql`
      INSERT INTO flows (shop_id, id, name, status, metric_name, property_conditions, contact_conditions) VALUES
        (${shop}, ${all}, 'every order', 'active', 'ordered', '[]', '[]'),
        (${shop}, ${even}, 'even orders', 'active', 'ordered', ${JSON.stringify([{ field: 'parity', op: 'eq', value: 'even' }])}::jsonb, '[]')`);
    const metrics: MetricEvent[] = [];
    for (let i = 0; i < 3000; i++) {
      // Every twentieth record repeats an earlier metric event, as a projector crash can.
      const again = i >= 100 && i % 20 === 0 ? metrics[i - 50] : null;
      if (again) {
        metrics.push(again);
        continue;
      }
      const id = randomUUID();
      metrics.push({
        id,
        shop_id: shop,
        activity_id: id,
        metric_name: 'ordered',
        value: i,
        additional_properties: { parity: i % 2 === 0 ? 'even' : 'odd' },
        context_object_id: null,
        context_object_type: null,
        metric_object_id: null,
        metric_object_type: null,
        deduping_key: null,
        name: `Order ${i}`,
        description: null,
        event_time: new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString(),
        recorded_at: new Date().toISOString(),
        contact: null,
        remote_id: null,
        remote_platform: null,
      });
    }
    const unique = new Map(metrics.map((m) => [m.id, m]));
    const expected = new Set<string>();
    for (const m of unique.values()) {
      expected.add(`${all}/${m.id}`);
      if (m.additional_properties.parity === 'even') expected.add(`${even}/${m.id}`);
    }

    const one = startService(rt, 'services/flow-matcher/src/main.ts');
    const [before, after] = halves(metrics.map((m) => metricsTopic.record(m)));
    const publishing = stream(rt, rt.topics.metrics, before);
    const triggers = sql`SELECT count(*) AS n FROM flow_triggers WHERE shop_id = ${shop}`;
    await waitFor(async () => (await count(rt, triggers)) >= 600, { timeoutMs: 120_000, message: 'the first process writes some triggers' });
    one.child.kill('SIGKILL');
    expect(await one.exited).toBeNull();
    await publishing;
    await stream(rt, rt.topics.metrics, after);
    const atCrash = await count(rt, triggers);
    expect(atCrash).toBeLessThan(expected.size);

    const two = startService(rt, 'services/flow-matcher/src/main.ts');
    try {
      await waitFor(async () => (await count(rt, triggers)) === expected.size, {
        timeoutMs: 150_000,
        intervalMs: 250,
        message: 'every trigger after the restart',
      });
      await waitFor(async () => (await count(rt, sql`SELECT count(*) AS n FROM outbox WHERE topic = ${rt.topics.flowTriggers} AND key = ${shop}`)) === 0, {
        timeoutMs: 30_000,
        message: 'the outbox drained',
      });
    } finally {
      two.child.kill('SIGTERM');
      expect(await two.exited).toBe(0);
    }

    const rows = await rt.db.query(sql`SELECT id, flow_id, metric_event_id FROM flow_triggers WHERE shop_id = ${shop}`);
    expect(new Set(rows.map((r) => `${r.flow_id}/${r.metric_event_id}`))).toEqual(expected);
    expect(rows).toHaveLength(expected.size);
    const idOf = new Map(rows.map((r) => [`${r.flow_id}/${r.metric_event_id}`, r.id as string]));

    const published = distinct(
      await readTopic(
        rt,
        rt.topics.flowTriggers,
        (rs) => new Set(rs.map((r) => `${json(r).flow_id}/${json(r).metric_event_id}`)).size >= expected.size,
        60_000,
      ),
    );
    const seen = new Set<string>();
    for (const r of published) {
      const t = json(r);
      const pair = `${t.flow_id}/${t.metric_event_id}`;
      expect(t.id).toBe(idOf.get(pair));
      seen.add(pair);
    }
    expect(seen).toEqual(expected);
    console.log(`matcher crash: ${atCrash}/${expected.size} triggers at the kill; ${published.length} trigger records for ${expected.size} triggers`);
  });
});
