import { flowTriggersTopic, metricsTopic } from '@shopstream/contracts';
import { defineService, envSchema } from '@shopstream/runtime/define';
import { flowMatcherProjection } from './flowMatcherProjection.js';

export { matchFlow, holds, valueAtPath } from './matchFlow.js';
export { FlowIndex } from './flowIndex.js';
export { flowMatcherProjection } from './flowMatcherProjection.js';
export { triggerId } from './matchTriggers.js';

/** flow-matcher: runs `flowMatcherProjection` live. */
export const flowMatcher = defineService({
  name: 'flow-matcher',
  kind: 'consumer',
  config: envSchema.pick({ CONSUMER_GROUP_PREFIX: true, FLOW_REFRESH_MS: true, PRIVACY_MASTER_KEY: true, PRIVACY_MASTER_KEY_FILE: true }),
  projection: (config) => flowMatcherProjection(config.FLOW_REFRESH_MS),
  migrations: new URL('../migrations', import.meta.url),
  topics: { reads: [metricsTopic], emits: [flowTriggersTopic] },
});

/** Its start on a whole runtime (the context cut from it), for specs that compose services themselves. */
export const startFlowMatcher = flowMatcher.start;
