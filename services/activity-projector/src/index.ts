import { runLiveProjection } from '@shopstream/bus';
import type { ServiceFactory } from '@shopstream/runtime';
import { activityProjection } from './activityProjection.js';

export { activityProjection } from './activityProjection.js';

/** activity-projector: runs `activityProjection` live. */
export const startActivityProjector: ServiceFactory = async (rt) => {
  const logger = rt.logger.child({ component: 'activity-projector' });
  const projection = await runLiveProjection(activityProjection, {
    bus: rt.bus,
    db: rt.db,
    logger,
    topics: rt.topics,
    groupPrefix: rt.env.CONSUMER_GROUP_PREFIX,
    env: rt.env,
  });
  logger.info({ topic: rt.topics.events }, 'activity projector started');
  return {
    name: 'activity-projector',
    readiness: projection.readiness,
    stop: () => projection.stop(),
  };
};
