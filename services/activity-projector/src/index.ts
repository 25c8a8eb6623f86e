import { eventsTopic, metricsTopic } from '@shopstream/contracts';
import { defineService, envSchema } from '@shopstream/runtime/define';
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
});

/** Its start on a whole runtime (the context cut from it), for specs that compose services themselves. */
export const startActivityProjector = activityProjector.start;
