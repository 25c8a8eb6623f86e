import { runLiveProjection } from '@shopstream/bus';
import type { ServiceFactory } from '@shopstream/runtime';
import { conversationProjection } from './conversationProjection.js';

export { applyConversationRecords } from './applyConversationRecords.js';
export { conversationProjection } from './conversationProjection.js';

/** conversation-projector: runs `conversationProjection` live. */
export const startConversationProjector: ServiceFactory = async (rt) => {
  const projection = await runLiveProjection(conversationProjection, {
    bus: rt.bus,
    db: rt.db,
    logger: rt.logger.child({ component: 'conversation-projector' }),
    topics: rt.topics,
    groupPrefix: rt.env.CONSUMER_GROUP_PREFIX,
    env: rt.env,
  });
  return {
    name: 'conversation-projector',
    readiness: projection.readiness,
    stop: () => projection.stop(),
  };
};
