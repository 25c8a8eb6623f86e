import { v5 as uuidv5 } from 'uuid';
import { queryRows, sql, type Queryable } from '@shopstream/db';
import type { BusRecord } from '@shopstream/bus';
import type { EmittedRecord, ValidRecord } from '@shopstream/projections';
import { flowTriggersTopic, type FlowTriggerRecord, type MetricEvent } from '@shopstream/contracts';
import { counter } from '@shopstream/telemetry';
import { matchFlow } from './matchFlow.js';
import type { FlowIndex, IndexedFlow } from './flowIndex.js';

const matches = counter('shopstream_flow_triggers_total', 'Flow triggers written (new (flow, metric event) pairs).');

/** A trigger's id: a UUIDv5 of the metric event's id in the flow's namespace, so every replay derives the same one. */
export const triggerId = (flowId: string, metricEventId: string): string => uuidv5(metricEventId, flowId);

/**
 * Evaluates each metric event against its shop's flows for that metric that were active when the event was
 * recorded and writes one flow_triggers row per match (unique per flow and metric event); returns one
 * `flow-triggers` record per new row. Every value comes from the records: the id from flow and metric event,
 * matched_at is when the metric record entered the log.
 */
export async function matchTriggers(
  tx: Queryable,
  records: ValidRecord<MetricEvent>[],
  index: FlowIndex,
  topic: string,
  /**
   * The records whose triggers may be written (the flow matcher's: not an erased contact's), asked only of the records
   * that match a flow: a batch that matches none (most of them, on a shop with a few flows) reads nothing more.
   */
  screen: (matching: ValidRecord<MetricEvent>[]) => Promise<ValidRecord<MetricEvent>[]> = async (matching) => matching,
): Promise<EmittedRecord[]> {
  const candidates: FlowTriggerRecord[] = [];
  // The metric record each trigger comes from: the trigger's record continues its trace (traceparent).
  const causes = new Map<FlowTriggerRecord, BusRecord>();
  // A metric event may be in the log twice (at least once): the first copy wins, also within one batch.
  const seen = new Set<string>();
  const matching: { valid: ValidRecord<MetricEvent>; flows: IndexedFlow[] }[] = [];
  for (const valid of records) {
    const m = valid.value;
    const flows = index.candidates(m.shop_id, m.metric_name, m.recorded_at).filter((flow) => matchFlow(flow.trigger, m));
    if (flows.length > 0) matching.push({ valid, flows });
  }
  if (matching.length === 0) return [];
  const kept = new Set(await screen(matching.map((x) => x.valid)));
  for (const { valid, flows } of matching) {
    if (!kept.has(valid)) continue;
    const { record, value: m } = valid;
    for (const flow of flows) {
      const id = triggerId(flow.id, m.id);
      if (seen.has(id)) continue;
      seen.add(id);
      const candidate: FlowTriggerRecord = {
        id,
        shop_id: m.shop_id,
        flow_id: flow.id,
        metric_event_id: m.id,
        activity_id: m.activity_id,
        contact_id: m.contact?.id ?? null,
        metric_name: m.metric_name,
        matched_at: new Date(record.timestamp).toISOString(),
      };
      candidates.push(candidate);
      causes.set(candidate, record);
    }
  }
  if (candidates.length === 0) return [];
  const inserted = await queryRows(
    tx,
    sql`
    INSERT INTO flow_triggers (shop_id, id, flow_id, metric_event_id, activity_id, contact_id, matched_at)
    SELECT * FROM unnest(
      ${candidates.map((c) => c.shop_id)}::uuid[], ${candidates.map((c) => c.id)}::uuid[], ${candidates.map((c) => c.flow_id)}::uuid[],
      ${candidates.map((c) => c.metric_event_id)}::uuid[], ${candidates.map((c) => c.activity_id)}::uuid[], ${candidates.map((c) => c.contact_id)}::uuid[],
      ${candidates.map((c) => c.matched_at)}::timestamptz[])
    ON CONFLICT DO NOTHING
    RETURNING id`,
    (r) => String(r.id),
  );
  const fresh = new Set(inserted);
  const created = candidates.filter((c) => fresh.has(c.id));
  matches.inc(created.length);
  return created.map((t) => ({ topic, ...flowTriggersTopic.record(t), cause: causes.get(t) }));
}
