import { runProjectionWithOutbox } from '@shopstream/bus';
import { metricEventSchema } from '@shopstream/contracts';
import type { ServiceFactory } from '@shopstream/runtime';
import { FlowIndex } from './flowIndex.js';
import { FLOW_TRIGGER_OUTBOX, matchTriggers } from './matchTriggers.js';

export { matchFlow, holds, valueAtPath } from './matchFlow.js';
export { FlowIndex } from './flowIndex.js';

/**
 * flow-matcher: `metrics` -> flow_triggers, and through its outbox one `flow-triggers` record per
 * (flow, metric event). Flows come from an in-memory index reloaded every FLOW_REFRESH_MS.
 */
export const startFlowMatcher: ServiceFactory = async (rt) => {
  const logger = rt.logger.child({ component: 'flow-matcher' });
  const index = new FlowIndex(rt.db, logger);
  await index.refresh();
  index.start(rt.env.FLOW_REFRESH_MS);
  const projection = await runProjectionWithOutbox({
    bus: rt.bus,
    db: rt.db,
    logger,
    groupId: `${rt.env.CONSUMER_GROUP_PREFIX}flow-matcher`,
    topic: rt.topics.metrics,
    schema: metricEventSchema,
    apply: async (tx, records) => {
      await matchTriggers(tx, records, index, new Date());
    },
    outbox: { table: FLOW_TRIGGER_OUTBOX, topic: rt.topics.flowTriggers },
  });
  logger.info({ topic: rt.topics.metrics, refresh_ms: rt.env.FLOW_REFRESH_MS }, 'flow matcher started');
  return {
    name: 'flow-matcher',
    readiness: { 'flow-index': async () => index.ready },
    async stop() {
      await projection.stop();
      index.stop();
    },
  };
};
