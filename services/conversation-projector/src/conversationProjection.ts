import { defineProjection } from '@shopstream/bus';
import { conversationsTopic } from '@shopstream/contracts';
import { applyConversationRecords } from './applyConversationRecords.js';

/** `conversations` -> the export read model (conversations, conversation_messages). Emits nothing. */
export const conversationProjection = defineProjection({
  name: 'conversation-projector',
  version: 1,
  summary: 'conversations -> conversations, conversation_messages',
  topic: conversationsTopic,
  emits: [],
  tables: ['conversation_messages', 'conversations'],
  async open() {
    return {
      async apply(tx, records) {
        await applyConversationRecords(
          tx,
          records.map((r) => r.value),
        );
        return [];
      },
    };
  },
});
