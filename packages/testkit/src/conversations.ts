import { randomUUID } from 'node:crypto';
import type { ConversationData, ConversationUpserted, Message, MessageCreated } from '@shopstream/contracts';

/**
 * Conversation fixtures for the `conversations` topic, shared by the black-box tests, the services' specs and the
 * cross-shop seeding: a conversation with the least the contract requires (no agent, contact or user, no flags,
 * tags, intent or topic, an email, updated when it was created), so that a test names only what it is about.
 */

/** A conversation created at `created_at` with a new id; `over` sets any other field. */
export function testConversation(over: Partial<ConversationData> & { created_at: string }): ConversationData {
  return {
    id: randomUUID(),
    agent_id: null,
    contact_id: null,
    user_id: null,
    updated_at: over.created_at,
    flags: [],
    tags: [],
    intent: {},
    topic: {},
    type: 'email',
    ...over,
  };
}

/** A `conversation.upserted` of the shop, of testConversation(over). */
export function conversationUpserted(shopId: string, over: Partial<ConversationData> & { created_at: string }): ConversationUpserted {
  return { type: 'conversation.upserted', shop_id: shopId, conversation: testConversation(over) };
}

/** A `message.created` of the shop's conversation; the message gets a new id unless it has one. */
export function messageCreated(shopId: string, conversationId: string, message: Omit<Message, 'id'> & { id?: string }): MessageCreated {
  return {
    type: 'message.created',
    shop_id: shopId,
    conversation_id: conversationId,
    message: { id: message.id ?? randomUUID(), created_at: message.created_at, text: message.text },
  };
}

/**
 * A new conversation of the shop with one message, both at `at`, as `pnpm cli conversations import` reads them
 * from a file: its `conversation.upserted`, then the `message.created`. `over` sets other fields of the conversation.
 */
export function conversationWithMessage(
  shopId: string,
  { at, text, ...over }: { at: string; text: string } & Partial<ConversationData>,
): [ConversationUpserted, MessageCreated] {
  const upserted = conversationUpserted(shopId, { ...over, created_at: at });
  return [upserted, messageCreated(shopId, upserted.conversation.id, { created_at: at, text })];
}
