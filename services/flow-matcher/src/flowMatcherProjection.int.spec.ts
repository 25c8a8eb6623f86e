import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, type Db } from '@shopstream/db';
import { headers as H, schemas, type MetricEvent } from '@shopstream/contracts';
import { projectionSpec, raw, type ProjectionSpec } from '@shopstream/harness/projectionSpec';
import { flowMatcherProjection } from './flowMatcherProjection.js';
import { triggerId } from './matchTriggers.js';

const shop = '0190a2c4-0000-7000-8000-00000000000c';
const otherShop = '0190a2c4-0000-7000-8000-00000000000d';
const bigOrders = '0190a2c4-0000-7000-8000-0000000000f1';
const anyOrder = '0190a2c4-0000-7000-8000-0000000000f2';
const signups = '0190a2c4-0000-7000-8000-0000000000f3';
const contactId = '0190a2c4-0000-7000-8000-0000000000c2';
const erasedContactId = '0190a2c4-0000-7000-8000-0000000000c9';

async function seedFlows(db: Db): Promise<void> {
  const flow = (id: string, metric: string, conditions: unknown[], status = 'active') => sql`
    INSERT INTO flows (shop_id, id, name, status, metric_name, property_conditions, contact_conditions, created_at, updated_at)
    VALUES (${shop}, ${id}, ${id}, ${status}, ${metric}, ${JSON.stringify(conditions)}::jsonb, '[]'::jsonb, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')`;
  await db.query(flow(bigOrders, 'placed_order', [{ field: 'total', op: 'gt', value: 100 }]));
  await db.query(flow(anyOrder, 'placed_order', []));
  await db.query(flow(signups, 'signed_up', [], 'paused'));
}

const metric = (n: number, over: Partial<MetricEvent> = {}): MetricEvent => {
  const id = `0190a2c4-0000-7000-8000-${String(n).padStart(12, '0')}`;
  return {
    id,
    shop_id: shop,
    activity_id: id,
    metric_name: 'placed_order',
    value: null,
    additional_properties: { total: n * 60 },
    context_object_id: null,
    context_object_type: null,
    metric_object_id: null,
    metric_object_type: null,
    deduping_key: null,
    name: 'Placed Order',
    description: null,
    event_time: '2026-01-02T00:00:00.000Z',
    recorded_at: '2026-01-02T00:00:00.000Z',
    contact: { id: contactId, email: null, phone: null, remote_id: null, name: null },
    remote_id: null,
    remote_platform: null,
    ...over,
  };
};

let spec: ProjectionSpec<MetricEvent>;
beforeAll(async () => {
  spec = await projectionSpec(flowMatcherProjection(60_000), { seed: seedFlows, timestampOf: (n) => Date.parse('2026-01-02T00:00:00.000Z') + n * 1000 });
});
afterAll(async () => {
  await spec?.close();
});

const triggers = sql`SELECT id, flow_id, metric_event_id, activity_id, contact_id, matched_at FROM flow_triggers ORDER BY matched_at, flow_id`;

describe('flow matcher projection (given flows and metric events, when applied, then flow_triggers and flow-triggers records)', () => {
  it('triggers each active flow whose conditions hold, once per (flow, metric event), matched_at from the log', async () => {
    const small = metric(1); // total 60: only the flow without conditions
    const big = metric(2); // total 120: both
    await spec.given(small, big).then(async ({ rows, emitted }) => {
      expect(await rows(triggers)).toEqual([
        {
          id: triggerId(anyOrder, small.id),
          flow_id: anyOrder,
          metric_event_id: small.id,
          activity_id: small.id,
          contact_id: contactId,
          matched_at: new Date('2026-01-02T00:00:00.000Z'),
        },
        {
          id: triggerId(bigOrders, big.id),
          flow_id: bigOrders,
          metric_event_id: big.id,
          activity_id: big.id,
          contact_id: contactId,
          matched_at: new Date('2026-01-02T00:00:01.000Z'),
        },
        {
          id: triggerId(anyOrder, big.id),
          flow_id: anyOrder,
          metric_event_id: big.id,
          activity_id: big.id,
          contact_id: contactId,
          matched_at: new Date('2026-01-02T00:00:01.000Z'),
        },
      ]);
      expect(emitted.map((e) => [e.topic, e.key, e.value.id])).toEqual([
        [spec.topics.flowTriggers, shop, triggerId(anyOrder, small.id)],
        [spec.topics.flowTriggers, shop, triggerId(bigOrders, big.id)],
        [spec.topics.flowTriggers, shop, triggerId(anyOrder, big.id)],
      ]);
      expect(emitted[0].headers).toEqual({
        [H.contentType]: 'application/json',
        [H.schema]: schemas.flowTriggered,
        [H.shopId]: shop,
        [H.metricName]: 'placed_order',
      });
    });
  });

  it('triggers nothing for a paused flow, a flow created after the event was recorded, or another shop', async () => {
    await spec
      .given(metric(3, { metric_name: 'signed_up' }))
      .when(metric(4, { recorded_at: '2025-12-31T23:59:59.000Z' }), metric(5, { shop_id: otherShop }))
      .then(async ({ rows, emitted, applied }) => {
        expect(applied).toBe(3);
        expect(await rows(triggers)).toEqual([]);
        expect(emitted).toEqual([]);
      });
  });

  it('writes one trigger for a metric event in the log twice, and rejects a record that is not a metric event', async () => {
    const m = metric(6);
    await spec
      .given(m, raw('{"id":"nope"}'))
      .when(m)
      .then(async ({ rows, emitted, rejected }) => {
        expect((await rows(triggers)).map((r) => r.flow_id)).toEqual([bigOrders, anyOrder]);
        expect(emitted).toHaveLength(2);
        expect(rejected).toEqual([{ value: '{"id":"nope"}', reason: expect.stringMatching(/^schema: /) }]);
      });
  });

  it("triggers nothing for an erased contact's metric event, and goes on for the others of its batch", async () => {
    await spec.db.query(sql`
      INSERT INTO erased_contacts (shop_id, contact_id, job_id, erased_at)
      VALUES (${shop}, ${erasedContactId}, ${erasedContactId}, now()) ON CONFLICT DO NOTHING`);
    const erased = metric(7, { contact: { id: erasedContactId, email: null, phone: null, remote_id: null, name: null } });
    const live = metric(8);
    const anonymous = metric(9, { contact: null });
    await spec.given(erased, live, anonymous).then(async ({ rows, emitted, applied }) => {
      expect(applied).toBe(3);
      expect((await rows(triggers)).map((r) => [r.metric_event_id, r.flow_id])).toEqual([
        [live.id, bigOrders],
        [live.id, anyOrder],
        [anonymous.id, bigOrders],
        [anonymous.id, anyOrder],
      ]);
      expect(emitted).toHaveLength(4);
    });
  });

  it("stores with each trigger's outbox row the traceparent of its metric event (passed on as it came: tracing is off here)", async () => {
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    await spec.given(raw(JSON.stringify(metric(2)), { traceparent }), metric(1)).then(({ emitted }) => {
      // metric(2) (total 120) triggers both placed_order flows, metric(1) (total 60) the one without conditions.
      expect(emitted.map((e) => [e.value.metric_event_id, e.value.flow_id, e.headers.traceparent]).sort()).toEqual(
        [
          [metric(2).id, bigOrders, traceparent],
          [metric(2).id, anyOrder, traceparent],
          [metric(1).id, anyOrder, undefined],
        ].sort(),
      );
    });
  });
});
