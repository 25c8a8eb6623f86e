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
    // Kicked, not awaited: the next batch's Postgres work overlaps this batch's Kafka round trips. The rows
    // are committed, so nothing waits on this to be safe; a failed drain is retried by the timer.
    afterCommit: async () => {
      outbox.drain().catch((e) => logger.warn({ err: e }, 'outbox drain failed; the timer retries'));
    },
  });
  logger.info({ topic: rt.topics.events }, 'activity projector started');
  return {
    name: 'activity-projector',
    async stop() {
      await projection.stop();
      // Publish what this process committed before it goes; rows a failure leaves go out at the next start.
      await outbox.drain().catch((e) => logger.warn({ err: e }, 'final outbox drain failed; the rows stay for the next start'));
      await outbox.stop();
    },
  };
};
