import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '@shopstream/db';
import { headers as H, schemas, type EventRecord } from '@shopstream/contracts';
import { projectionSpec, raw, type ProjectionSpec } from '@shopstream/harness/projectionSpec';
import { eventRecordOf } from '@shopstream/testkit';
import { activityProjection } from './activityProjection.js';
import { metricRef, recoverMetricRecords } from './projectActivities.js';

const shop = '0190a2c4-0000-7000-8000-00000000000a';
const contact = { id: '0190a2c4-0000-7000-8000-0000000000c1', email: 'ada@example.com', phone: null, remote_id: null, name: 'Ada' };

const event = (n: number, over: Partial<EventRecord> = {}): EventRecord =>
  eventRecordOf({
    activity_id: `0190a2c4-0000-7000-8000-${String(n).padStart(12, '0')}`,
    shop_id: shop,
    activity_key: `key-${n}`,
    name: 'Placed Order',
    event_time: `2026-01-01T10:00:0${n}.000Z`,
    received_at: `2026-01-01T10:00:1${n}.000Z`,
    metric: { metric_name: 'placed_order', value: n, additional_properties: { n } },
    request_id: `req-${n}`,
    ...over,
  });

let spec: ProjectionSpec<EventRecord>;
beforeAll(async () => {
  spec = await projectionSpec(activityProjection);
});
afterAll(async () => {
  await spec?.close();
});

const activities = sql`SELECT id, name, event_time, recorded_at, contact_id FROM activities ORDER BY id`;
const timeline = sql`SELECT contact_id, activity_id, event_time FROM contact_timeline ORDER BY activity_id`;

describe('activity projection (given events records, when applied, then activities, timeline and metric events)', () => {
  it('writes one activity per event, a timeline entry for those with a contact, and emits one metric event each, in log order', async () => {
    await spec.given(event(1), event(2, { contact })).then(async ({ rows, emitted, rejected, applied }) => {
      expect(applied).toBe(2);
      expect(rejected).toEqual([]);
      expect(await rows(activities)).toEqual([
        {
          id: event(1).activity_id,
          name: 'Placed Order',
          event_time: new Date('2026-01-01T10:00:01.000Z'),
          recorded_at: new Date('2026-01-01T10:00:11.000Z'),
          contact_id: null,
        },
        {
          id: event(2).activity_id,
          name: 'Placed Order',
          event_time: new Date('2026-01-01T10:00:02.000Z'),
          recorded_at: new Date('2026-01-01T10:00:12.000Z'),
          contact_id: contact.id,
        },
      ]);
      expect(await rows(timeline)).toEqual([{ contact_id: contact.id, activity_id: event(2).activity_id, event_time: new Date('2026-01-01T10:00:02.000Z') }]);
      expect(emitted.map((e) => [e.topic, e.key, e.value.id, e.value.recorded_at])).toEqual([
        [spec.topics.metrics, shop, event(1).activity_id, '2026-01-01T10:00:11.000Z'],
        [spec.topics.metrics, shop, event(2).activity_id, '2026-01-01T10:00:12.000Z'],
      ]);
      expect(emitted[1].headers).toEqual({
        [H.contentType]: 'application/json',
        [H.schema]: schemas.metricEvent,
        [H.shopId]: shop,
        [H.metricName]: 'placed_order',
      });
    });
  });

  it('creates nothing and emits nothing for an event seen before, in the same batch or a later one (first write wins)', async () => {
    await spec
      .given(event(1), event(1, { name: 'Second copy' }))
      .when(event(1, { name: 'Third copy' }), event(3))
      .then(async ({ rows, emitted, applied }) => {
        expect(applied).toBe(4);
        expect((await rows(activities)).map((r) => [r.id, r.name])).toEqual([
          [event(1).activity_id, 'Placed Order'],
          [event(3).activity_id, 'Placed Order'],
        ]);
        expect(emitted.map((e) => e.value.id)).toEqual([event(1).activity_id, event(3).activity_id]);
      });
  });

  it('rebuilds, after a crash, the metric events a batch emitted from their Activity rows: same ids, fields and headers, times in UTC', async () => {
    const withOffset = event(7, { contact, event_time: '2026-01-01T12:00:07+02:00', remote_id: 'order-7', remote_platform: 'shopify' });
    const erased = event(8, { contact: { ...contact, id: '0190a2c4-0000-7000-8000-0000000000c2' } });
    await spec.given(event(6), withOffset, erased).then(async ({ db, emitted }) => {
      await db.query(sql`DELETE FROM activities WHERE id = ${erased.activity_id}`);
      const rebuilt = await recoverMetricRecords(db, [event(6), withOffset, erased].map(metricRef));
      expect(rebuilt.map((r) => r.key)).toEqual([shop, shop]);
      expect(rebuilt.map((r) => r.headers)).toEqual(emitted.slice(0, 2).map((e) => e.headers));
      expect(rebuilt.map((r) => JSON.parse(r.value))).toEqual([emitted[0].value, { ...emitted[1].value, event_time: '2026-01-01T10:00:07.000Z' }]);
      // Field order as emitted, not jsonb's.
      expect(Object.keys(JSON.parse(rebuilt[1].value))).toEqual(Object.keys(emitted[1].value));
      expect(Object.keys(JSON.parse(rebuilt[1].value).contact)).toEqual(Object.keys(emitted[1].value.contact));
    });
  });

  it('rejects a record that is not an event record and applies the rest of its batch', async () => {
    await spec.given(raw('{"not":"an event"}'), event(4)).then(async ({ rows, rejected }) => {
      expect(rejected).toEqual([{ value: '{"not":"an event"}', reason: expect.stringMatching(/^schema: /) }]);
      expect((await rows(activities)).map((r) => r.id)).toEqual([event(4).activity_id]);
    });
  });

  it("stores with the metric event's outbox row the traceparent of the record that created its Activity (passed on as it came: tracing is off here)", async () => {
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    await spec.given(raw(JSON.stringify(event(5)), { traceparent }), event(6)).then(async ({ emitted }) => {
      expect(emitted.map((e) => [e.value.id, e.headers.traceparent])).toEqual([
        [event(5).activity_id, traceparent],
        [event(6).activity_id, undefined],
      ]);
    });
  });
});
