import { runProjection } from '@shopstream/bus';
import { conversationRecordSchema } from '@shopstream/contracts';
import type { ServiceFactory } from '@shopstream/runtime';
import { applyConversationRecords } from './applyConversationRecords.js';

export { applyConversationRecords } from './applyConversationRecords.js';

/** conversation-projector: the export read model (conversations, conversation_messages) from the `conversations` topic. */
export const startConversationProjector: ServiceFactory = async (rt) => {
  const groupId = `${rt.env.CONSUMER_GROUP_PREFIX}conversation-projector`;
  const projection = await runProjection({
    bus: rt.bus,
    db: rt.db,
    logger: rt.logger.child({ component: 'conversation-projector' }),
    groupId,
    topic: rt.topics.conversations,
    schema: conversationRecordSchema,
    apply: (tx, records) => applyConversationRecords(tx, records.map((r) => r.value)),
  });
  return {
    name: 'conversation-projector',
    stop: () => projection.stop(),
  };
};
