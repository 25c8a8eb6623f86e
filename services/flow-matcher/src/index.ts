import { runProjection, startOutboxDrainer } from '@shopstream/bus';
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
  const logger = rt.logger.child({ service: 'flow-matcher' });
  const index = new FlowIndex(rt.db, logger);
  await index.refresh();
  index.start(rt.env.FLOW_REFRESH_MS);
  const outbox = startOutboxDrainer({ db: rt.db, bus: rt.bus, logger, table: FLOW_TRIGGER_OUTBOX, topic: rt.topics.flowTriggers, intervalMs: 1_000 });
  await outbox.drain().catch((e) => logger.warn({ err: e }, 'initial outbox drain failed; the timer retries'));
  const projection = await runProjection({
    bus: rt.bus,
    db: rt.db,
    logger,
    groupId: `${rt.env.CONSUMER_GROUP_PREFIX}flow-matcher`,
    topic: rt.topics.metrics,
    schema: metricEventSchema,
    apply: async (tx, records) => {
      await matchTriggers(tx, records, index, new Date());
    },
    // Kicked, not awaited: the next batch's Postgres work overlaps this batch's Kafka round trips. The rows
    // are committed, so nothing waits on this to be safe; a failed drain is retried by the timer.
    afterCommit: async () => {
      outbox.drain().catch((e) => logger.warn({ err: e }, 'outbox drain failed; the timer retries'));
    },
  });
  logger.info({ topic: rt.topics.metrics, refresh_ms: rt.env.FLOW_REFRESH_MS }, 'flow matcher started');
  return {
    name: 'flow-matcher',
    readiness: { 'flow-index': async () => index.ready },
    async stop() {
      await projection.stop();
      index.stop();
      // Publish what this process committed before it goes; rows a failure leaves go out at the next start.
      await outbox.drain().catch((e) => logger.warn({ err: e }, 'final outbox drain failed; the rows stay for the next start'));
      await outbox.stop();
    },
  };
};
