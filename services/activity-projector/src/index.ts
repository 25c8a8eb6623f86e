import { runProjectionWithOutbox } from '@shopstream/bus';
import { eventRecordSchema } from '@shopstream/contracts';
import type { ServiceFactory } from '@shopstream/runtime';
import { METRIC_OUTBOX, projectActivities } from './projectActivities.js';

export { projectActivities, metricEventOf, METRIC_OUTBOX } from './projectActivities.js';

/**
 * activity-projector: `events` -> activities, contact_timeline, and through the metric outbox one
 * `metrics` record per new Activity (at least once, same id).
 */
export const startActivityProjector: ServiceFactory = async (rt) => {
  const logger = rt.logger.child({ component: 'activity-projector' });
  const projection = await runProjectionWithOutbox({
    bus: rt.bus,
    db: rt.db,
    logger,
    groupId: `${rt.env.CONSUMER_GROUP_PREFIX}activity-projector`,
    topic: rt.topics.events,
    schema: eventRecordSchema,
    apply: async (tx, records) => {
      await projectActivities(tx, records, new Date());
    },
    outbox: { table: METRIC_OUTBOX, topic: rt.topics.metrics },
  });
  logger.info({ topic: rt.topics.events }, 'activity projector started');
  return {
    name: 'activity-projector',
    stop: () => projection.stop(),
  };
};
