import { conversationsTopic } from '@shopstream/contracts';
import { defineService, envSchema } from '@shopstream/runtime/define';
import { conversationProjection } from './conversationProjection.js';

export { applyConversationRecords } from './applyConversationRecords.js';
export { conversationProjection } from './conversationProjection.js';

/** conversation-projector: runs `conversationProjection` live. */
export const conversationProjector = defineService({
  name: 'conversation-projector',
  kind: 'consumer',
  config: envSchema.pick({ CONSUMER_GROUP_PREFIX: true, PRIVACY_MASTER_KEY: true, PRIVACY_MASTER_KEY_FILE: true }),
  projection: () => conversationProjection,
  migrations: new URL('../migrations', import.meta.url),
  topics: { reads: [conversationsTopic], emits: [] },
});

/** Its start on a whole runtime (the context cut from it), for specs that compose services themselves. */
export const startConversationProjector = conversationProjector.start;
