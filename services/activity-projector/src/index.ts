import { runProjection, startOutboxDrainer } from '@shopstream/bus';
import { eventRecordSchema } from '@shopstream/contracts';
import type { ServiceFactory } from '@shopstream/runtime';
import { METRIC_OUTBOX, projectActivities } from './projectActivities.js';

export { projectActivities, metricEventOf, METRIC_OUTBOX } from './projectActivities.js';

/**
 * activity-projector: `events` -> activities, contact_timeline, and through the metric outbox one
 * `metrics` record per new Activity (at least once, same id).
 */
export const startActivityProjector: ServiceFactory = async (rt) => {
  const logger = rt.logger.child({ service: 'activity-projector' });
  const outbox = startOutboxDrainer({ db: rt.db, bus: rt.bus, logger, table: METRIC_OUTBOX, topic: rt.topics.metrics, intervalMs: 1_000 });
  // Rows a crash left behind go out now, not on the first tick.
  await outbox.drain().catch((e) => logger.warn({ err: e }, 'initial outbox drain failed; the timer retries'));
  const projection = await runProjection({
    bus: rt.bus,
    db: rt.db,
    logger,
    groupId: `${rt.env.CONSUMER_GROUP_PREFIX}activity-projector`,
    topic: rt.topics.events,
    schema: eventRecordSchema,
    apply: async (tx, records) => {
      await projectActivities(tx, records, new Date());
    },
    // A failed publish fails the batch: it is delivered again, applies nothing new, and drains again.
    afterCommit: async () => {
      await outbox.drain();
    },
  });
  logger.info({ topic: rt.topics.events }, 'activity projector started');
  return {
    name: 'activity-projector',
    async stop() {
      await projection.stop();
      await outbox.stop();
    },
  };
};
