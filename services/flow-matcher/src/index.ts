import { runLiveProjection } from '@shopstream/bus';
import type { ServiceFactory } from '@shopstream/runtime';
import { flowMatcherProjection } from './flowMatcherProjection.js';

export { matchFlow, holds, valueAtPath } from './matchFlow.js';
export { FlowIndex } from './flowIndex.js';
export { flowMatcherProjection } from './flowMatcherProjection.js';
export { triggerId } from './matchTriggers.js';

/** flow-matcher: runs `flowMatcherProjection` live. */
export const startFlowMatcher: ServiceFactory = async (rt) => {
  const logger = rt.logger.child({ component: 'flow-matcher' });
  const projection = await runLiveProjection(flowMatcherProjection(rt.env.FLOW_REFRESH_MS), {
    bus: rt.bus,
    db: rt.db,
    logger,
    topics: rt.topics,
    groupPrefix: rt.env.CONSUMER_GROUP_PREFIX,
    env: rt.env,
  });
  logger.info({ topic: rt.topics.metrics, refresh_ms: rt.env.FLOW_REFRESH_MS }, 'flow matcher started');
  return {
    name: 'flow-matcher',
    readiness: projection.readiness,
    stop: () => projection.stop(),
  };
};
