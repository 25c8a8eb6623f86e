import { defineProjection } from '@shopstream/bus';
import { eventsTopic, metricsTopic } from '@shopstream/contracts';
import { metricEventOf, metricRecord, projectActivities } from './projectActivities.js';

/**
 * `events` -> activities and contact_timeline, and one `metrics` record per new Activity (at least once,
 * same id). A replayed event creates nothing and emits nothing.
 */
export const activityProjection = defineProjection({
  name: 'activity-projector',
  version: 2,
  summary: 'events -> activities, contact_timeline; emits metrics',
  topic: eventsTopic,
  emits: [metricsTopic],
  tables: ['activities', 'contact_timeline'],
  async open({ topics }) {
    return {
      async apply(tx, records) {
        const created = await projectActivities(tx, records);
        // Each metric event continues the trace of the record that created its Activity (its traceparent).
        const causes = new Map(records.map((r) => [r.value, r.record]));
        // In log order, so each shop's metric events keep the order of its events.
        return created.map((e) => metricRecord(metricEventOf(e), topics.metrics, causes.get(e)));
      },
    };
  },
});
