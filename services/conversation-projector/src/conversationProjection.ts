import { defineProjection } from '@shopstream/projections';
import { conversationsTopic } from '@shopstream/contracts';
import { KeyCache, openConversationRecords, openKeyring } from '@shopstream/privacy';
import { applyConversationRecords } from './applyConversationRecords.js';

/**
 * `conversations` -> the export read model (conversations, conversation_messages). Emits nothing. Sealed records
 * (conversation-record.v2) are opened under their contact's data key; records of an erased contact's
 * conversations are left out (docs/privacy.md).
 */
export const conversationProjection = defineProjection({
  name: 'conversation-projector',
  version: 1,
  summary: 'conversations -> conversations, conversation_messages',
  topic: conversationsTopic,
  emits: [],
  tables: ['conversation_messages', 'conversations'],
  async open({ db, logger, env }) {
    const keys = new KeyCache(await openKeyring({ env: env ?? process.env, db, logger }));
    return {
      async apply(tx, records) {
        await applyConversationRecords(
          tx,
          await openConversationRecords(
            tx,
            keys,
            records.map((r) => r.value),
            logger,
          ),
        );
        return [];
      },
    };
  },
});
