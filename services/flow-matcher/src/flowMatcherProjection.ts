import { defineProjection, type ProjectionDefinition } from '@shopstream/projections';
import { flowTriggersTopic, metricsTopic, type MetricEvent } from '@shopstream/contracts';
import { KeyCache, openKeyring, withoutErasedContacts } from '@shopstream/privacy';
import { FlowIndex } from './flowIndex.js';
import { matchTriggers } from './matchTriggers.js';

/**
 * `metrics` -> flow_triggers, and one `flow-triggers` record per (flow, metric event). Flows come from an
 * in-memory index reloaded every refreshMs (and when a batch is newer than it).
 */
export function flowMatcherProjection(refreshMs: number): ProjectionDefinition<MetricEvent> {
  return defineProjection({
    name: 'flow-matcher',
    version: 2,
    summary: 'metrics -> flow_triggers; emits flow-triggers',
    topic: metricsTopic,
    emits: [flowTriggersTopic],
    tables: ['flow_triggers'],
    async open({ db, logger, topics, env }) {
      const keys = new KeyCache(await openKeyring({ env: env ?? process.env, db, logger }));
      const index = new FlowIndex(db, logger);
      await index.refresh();
      index.start(refreshMs);
      return {
        prepare: (records) => index.upTo(records.map((r) => r.value.recorded_at)),
        // Metric events keep their contact in plaintext until `metrics`' retention ends: an erased one triggers nothing.
        // Asked only of the events that match a flow, so a batch that matches none reads and locks no key rows.
        apply: async (tx, records) =>
          matchTriggers(tx, records, index, topics.flowTriggers, (matching) =>
            withoutErasedContacts(tx, keys, matching, (r) => (r.value.contact ? { shop_id: r.value.shop_id, contact_id: r.value.contact.id } : null)),
          ),
        readiness: { 'flow-index': async () => index.ready },
        async close() {
          index.stop();
        },
      };
    },
  });
}
