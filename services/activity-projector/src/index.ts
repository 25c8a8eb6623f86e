import { runLiveProjection } from '@shopstream/bus';
import { eventsTopic, metricsTopic } from '@shopstream/contracts';
import { checkedEmits, defineService, envSchema } from '@shopstream/runtime';
import { activityProjection } from './activityProjection.js';

export { activityProjection } from './activityProjection.js';

/** activity-projector: runs `activityProjection` live. */
export const activityProjector = defineService({
  name: 'activity-projector',
  kind: 'consumer',
  config: envSchema.pick({ CONSUMER_GROUP_PREFIX: true, PRIVACY_MASTER_KEY: true, PRIVACY_MASTER_KEY_FILE: true }),
  projection: () => activityProjection,
  migrations: new URL('../migrations', import.meta.url),
  topics: { reads: [eventsTopic], emits: [metricsTopic] },
  async start(rt) {
    const logger = rt.logger.child({ component: 'activity-projector' });
    const projection = await runLiveProjection(checkedEmits(activityProjection), {
      bus: rt.bus,
      db: rt.db,
      logger,
      topics: rt.topics,
      groupPrefix: rt.config.CONSUMER_GROUP_PREFIX,
      env: rt.config,
    });
    logger.info({ topic: rt.topics.events }, 'activity projector started');
    return {
      name: 'activity-projector',
      readiness: projection.readiness,
      stop: () => projection.stop(),
    };
  },
});

/** Its start on a whole runtime (the context cut from it), for specs that compose services themselves. */
export const startActivityProjector = activityProjector.start;
