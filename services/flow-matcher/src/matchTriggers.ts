import { randomUUID } from 'node:crypto';
import { sql, type Queryable } from '@shopstream/db';
import { enqueueOutbox, type ValidRecord } from '@shopstream/bus';
import { headers as H, schemas, type FlowTriggerRecord, type MetricEvent } from '@shopstream/contracts';
import { counter } from '@shopstream/telemetry';
import { matchFlow } from './matchFlow.js';
import type { FlowIndex } from './flowIndex.js';

export const FLOW_TRIGGER_OUTBOX = 'flow_trigger_outbox';

const matches = counter('shopstream_flow_triggers_total', 'Flow triggers written (new (flow, metric event) pairs).');

/**
 * Evaluates each metric event against its shop's active flows for that metric and writes one flow_triggers
 * row per match (unique per flow and metric event) plus, for each new row, one outbox record for
 * `flow-triggers`. Returns the triggers it created.
 */
export async function matchTriggers(tx: Queryable, records: ValidRecord<MetricEvent>[], index: FlowIndex, matchedAt: Date): Promise<FlowTriggerRecord[]> {
  const candidates: FlowTriggerRecord[] = [];
  for (const { value: m } of records) {
    for (const flow of index.candidates(m.shop_id, m.metric_name)) {
      if (!matchFlow(flow.trigger, m)) continue;
      candidates.push({
        id: randomUUID(),
        shop_id: m.shop_id,
        flow_id: flow.id,
        metric_event_id: m.id,
        activity_id: m.activity_id,
        contact_id: m.contact?.id ?? null,
        metric_name: m.metric_name,
        matched_at: matchedAt.toISOString(),
      });
    }
  }
  if (candidates.length === 0) return [];
  const inserted = await tx.query(sql`
    INSERT INTO flow_triggers (shop_id, id, flow_id, metric_event_id, activity_id, contact_id, matched_at)
    SELECT u.shop_id, u.id, u.flow_id, u.metric_event_id, u.activity_id, u.contact_id, ${matchedAt}::timestamptz
    FROM unnest(
      ${candidates.map((c) => c.shop_id)}::uuid[], ${candidates.map((c) => c.id)}::uuid[], ${candidates.map((c) => c.flow_id)}::uuid[],
      ${candidates.map((c) => c.metric_event_id)}::uuid[], ${candidates.map((c) => c.activity_id)}::uuid[], ${candidates.map((c) => c.contact_id)}::uuid[]
    ) AS u(shop_id, id, flow_id, metric_event_id, activity_id, contact_id)
    ON CONFLICT (flow_id, metric_event_id) DO NOTHING
    RETURNING id`);
  const fresh = new Set(inserted.map((r) => r.id as string));
  const created = candidates.filter((c) => fresh.has(c.id));
  await enqueueOutbox(
    tx,
    FLOW_TRIGGER_OUTBOX,
    created.map((t) => ({
      shop_id: t.shop_id,
      key: t.shop_id,
      value: JSON.stringify(t),
      headers: { [H.contentType]: 'application/json', [H.schema]: schemas.flowTriggered, [H.shopId]: t.shop_id, [H.metricName]: t.metric_name },
    })),
  );
  matches.inc(created.length);
  return created;
}
