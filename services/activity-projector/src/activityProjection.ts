import { defineProjection } from '@shopstream/projections';
import { eventsTopic, metricsTopic } from '@shopstream/contracts';
import { KeyCache, openEventRecords, openKeyring } from '@shopstream/privacy';
import { metricEventOf, metricRecord, projectActivities, recoverMetricRecords } from './projectActivities.js';

/**
 * `events` -> activities and contact_timeline, and one `metrics` record per new Activity (at least once,
 * same id). A replayed event creates nothing and emits nothing. Sealed records are opened with their contact's
 * data key; a record of an erased contact is applied as erased: it creates and emits nothing (docs/privacy.md).
 */
export const activityProjection = defineProjection({
  name: 'activity-projector',
  version: 2,
  summary: 'events -> activities, contact_timeline; emits metrics',
  topic: eventsTopic,
  emits: [metricsTopic],
  tables: ['activities', 'contact_timeline'],
  async open({ db, logger, topics, env }) {
    const keys = new KeyCache(await openKeyring({ env: env ?? process.env, db, logger }));
    return {
      async apply(tx, records) {
        const opened = await openEventRecords(tx, keys, records, logger);
        const created = await projectActivities(tx, opened);
        // Each metric event continues the trace of the record that created its Activity (its traceparent).
        const causes = new Map(opened.map((r) => [r.value, r.record]));
        // In log order, so each shop's metric events keep the order of its events.
        return created.map((e) => metricRecord(metricEventOf(e), topics.metrics, causes.get(e)));
      },
      // A batch's metric events are relayed from memory; after a crash, rebuilt from their Activity rows.
      recover: recoverMetricRecords,
    };
  },
});
