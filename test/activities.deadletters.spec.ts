import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '@shopstream/db';
import { headers as H, schemas, type EventRecord, type MetricEvent } from '@shopstream/contracts';
import type { BusRecord } from '@shopstream/bus';
import type { Runtime } from '@shopstream/runtime';
import { startActivityProjector } from '@shopstream/activity-projector';
import { startFlowMatcher } from '@shopstream/flow-matcher';
import { readTopic, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';
import { eventRecordOf } from '@shopstream/testkit';

/** Records that fail their schema go to `<topic>.dlq` with the reason, are counted, and block nothing. */
let rt: Runtime;
let server: TestServer;
const shop = randomUUID();
/** A flow that matches every `valid` metric event: proves the matcher went on past the bad record. */
const flowId = randomUUID();

beforeAll(async () => {
  // Consumer groups of their own: a group shared with other spec files would rebalance with theirs.
  rt = await startTestRuntime({ CONSUMER_GROUP_PREFIX: `dead-letters-spec-${randomUUID()}.` }, 'dead-letters-spec');
  // Before the matcher starts, so its first index load holds it.
  await rt.db.query(sql`INSERT INTO flows (shop_id, id, name, status, metric_name) VALUES (${shop}, ${flowId}, 'all valid', 'active', 'valid')`);
  server = await startTestServer(rt, [await startActivityProjector(rt), await startFlowMatcher(rt)]);
});
afterAll(async () => {
  await server?.stop();
});

const deadLetterCount = async (topic: string): Promise<number> => {
  const text = await (await fetch(`${server.baseUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('shopstream_dead_letters_total{') && l.includes(`topic="${topic}"`));
  return line ? Number(line.split(' ').pop()) : 0;
};

const eventRecord = (): EventRecord =>
  eventRecordOf({
    activity_id: randomUUID(),
    shop_id: shop,
    name: 'After the bad one',
    event_time: '2026-03-01T00:00:00Z',
    // Now, not in the past: a flow matches the metric events recorded from its creation on.
    received_at: new Date().toISOString(),
    metric: { metric_name: 'valid', value: 1 },
    request_id: 'r',
  });

describe('dead letters', () => {
  it('a malformed record on events and on metrics goes to its .dlq with the reason, is counted, and the next record is still applied', async () => {
    const eventsBefore = await deadLetterCount(rt.topics.events);
    const metricsBefore = await deadLetterCount(rt.topics.metrics);
    await waitFor(async () => (await fetch(`${server.baseUrl}/readyz`)).status === 200, { message: 'ready' });

    const badEvent = JSON.stringify({ activity_id: 'not-a-uuid', shop_id: shop, name: '' });
    await rt.bus.publish(rt.topics.events, [{ key: shop, value: badEvent, headers: { [H.schema]: schemas.eventRecorded, [H.shopId]: shop } }]);
    await rt.bus.publish(rt.topics.events, [{ key: shop, value: '{not json', headers: { [H.shopId]: shop } }]);
    // Passes the schema, but Postgres cannot store a NUL: without the check it would fail every insert of its batch.
    const nulEvent = JSON.stringify({ ...eventRecord(), name: 'Placed\u0000order' });
    await rt.bus.publish(rt.topics.events, [{ key: shop, value: nulEvent, headers: { [H.schema]: schemas.eventRecorded, [H.shopId]: shop } }]);
    // An unpaired surrogate (JSON.stringify writes it as the escape \ud800) and a `__proto__` key spelled with
    // escapes: JSON allows both, the tables do not (and zod would drop the key into the prototype).
    const surrogateEvent = JSON.stringify({ ...eventRecord(), name: 'Placed \ud800 order' });
    const protoEvent = JSON.stringify(eventRecord()).replace(/^\{/, '{"\\u005f_proto__":{"x":1},');
    for (const value of [surrogateEvent, protoEvent])
      await rt.bus.publish(rt.topics.events, [{ key: shop, value, headers: { [H.schema]: schemas.eventRecorded, [H.shopId]: shop } }]);
    const badMetric = JSON.stringify({ id: randomUUID(), shop_id: shop, metric_name: 'valid' });
    await rt.bus.publish(rt.topics.metrics, [{ key: shop, value: badMetric, headers: { [H.schema]: schemas.metricEvent, [H.shopId]: shop } }]);
    const good = eventRecord();
    await rt.bus.publish(rt.topics.events, [{ key: shop, value: JSON.stringify(good), headers: { [H.schema]: schemas.eventRecorded, [H.shopId]: shop } }]);

    // The valid event after the bad ones is projected, its metric event passes the bad metric record, and triggers.
    await waitFor(
      async () =>
        (await rt.db.query(sql`SELECT 1 FROM flow_triggers WHERE shop_id = ${shop} AND flow_id = ${flowId} AND metric_event_id = ${good.activity_id}`))
          .length === 1,
      {
        message: 'the valid record after the bad ones is projected and matched',
      },
    );
    const activities = await rt.db.query(sql`SELECT id FROM activities WHERE shop_id = ${shop}`);
    expect(activities.map((r) => r.id)).toEqual([good.activity_id]);

    const eventsDlq = await readTopic(rt, rt.topics.dlq(rt.topics.events), (rs) => new Set(rs.map((r) => r.offset)).size >= 5);
    const uniqueEvents = [...new Map(eventsDlq.map((r: BusRecord) => [`${r.partition}/${r.offset}`, r])).values()];
    expect(uniqueEvents.map((r) => r.value.toString()).sort()).toEqual([badEvent, '{not json', nulEvent, surrogateEvent, protoEvent].sort());
    for (const r of uniqueEvents) {
      expect(r.key).toBe(shop);
      expect(r.headers[H.dlqSourceTopic]).toBe(rt.topics.events);
      const v = r.value.toString();
      expect(r.headers[H.dlqReason]).toMatch(
        v === badEvent
          ? /^schema: .*activity_id/
          : v === nulEvent || v === surrogateEvent
            ? /^unstorable: name: Contains a NUL character \(\\u0000\) or an unpaired surrogate/
            : v === protoEvent
              ? /^unstorable: __proto__: Not allowed as a key/
              : /^invalid JSON/,
      );
      expect(r.headers[H.shopId]).toBe(shop);
    }
    const metricsDlq = await readTopic(rt, rt.topics.dlq(rt.topics.metrics), (rs) => rs.length >= 1);
    expect(new Set(metricsDlq.map((r) => r.value.toString()))).toEqual(new Set([badMetric]));
    expect(metricsDlq[0].headers[H.dlqReason]).toMatch(/^schema: /);
    expect(metricsDlq[0].headers[H.dlqSourceTopic]).toBe(rt.topics.metrics);

    expect(await deadLetterCount(rt.topics.events)).toBe(eventsBefore + 5);
    expect(await deadLetterCount(rt.topics.metrics)).toBe(metricsBefore + 1);
    const metricsOnLog = await readTopic(rt, rt.topics.metrics, (rs) => rs.some((r) => JSON.parse(r.value.toString()).id === good.activity_id));
    const m = metricsOnLog.map((r) => JSON.parse(r.value.toString()) as MetricEvent).find((x) => x.id === good.activity_id);
    expect(m?.metric_name).toBe('valid');
  });

  it('a record the database refuses (it passes every check before) is dead-lettered alone; the rest of its batch is applied', async () => {
    const other = randomUUID();
    const before = await deadLetterCount(rt.topics.events);
    // A constraint of this test's own database stands for any refusal no check before the insert foresaw.
    await rt.db.query(sql`ALTER TABLE activities ADD CONSTRAINT dead_letters_spec_poison CHECK (name <> 'poison')`);
    try {
      const records = ['first', 'poison', 'third'].map((name) => ({ ...eventRecord(), shop_id: other, name }));
      // One publish: one batch on one partition (the key is the shop).
      await rt.bus.publish(
        rt.topics.events,
        records.map((r) => ({ key: other, value: JSON.stringify(r), headers: { [H.schema]: schemas.eventRecorded, [H.shopId]: other } })),
      );
      await waitFor(async () => (await rt.db.query(sql`SELECT 1 FROM activities WHERE shop_id = ${other}`)).length === 2, {
        message: 'the two good records applied',
      });
      const names = (await rt.db.query(sql`SELECT name FROM activities WHERE shop_id = ${other} ORDER BY name`)).map((r) => r.name);
      expect(names).toEqual(['first', 'third']);
      const dlqd = await readTopic(rt, rt.topics.dlq(rt.topics.events), (rs) => rs.some((r) => r.value.toString().includes(records[1].activity_id)));
      const poison = dlqd.find((r: BusRecord) => r.value.toString().includes(records[1].activity_id))!;
      expect(poison.headers[H.dlqReason]).toMatch(/^refused by the database: .*dead_letters_spec_poison/);
      expect(await deadLetterCount(rt.topics.events)).toBe(before + 1);
      // And the partition goes on: a later record is applied.
      const later = { ...eventRecord(), shop_id: other, name: 'later' };
      await rt.bus.publish(rt.topics.events, [{ key: other, value: JSON.stringify(later), headers: { [H.schema]: schemas.eventRecorded, [H.shopId]: other } }]);
      await waitFor(async () => (await rt.db.query(sql`SELECT 1 FROM activities WHERE id = ${later.activity_id}`)).length === 1, {
        message: 'a later record applied',
      });
    } finally {
      await rt.db.query(sql`ALTER TABLE activities DROP CONSTRAINT dead_letters_spec_poison`);
    }
  });
});
