import {
  sealedConversationFieldsSchema,
  sealedMessageFieldsSchema,
  type ConversationRecord,
  type SealedConversationUpserted,
  type SealedMessageCreated,
  type StoredConversationRecord,
} from '@shopstream/contracts';
import { queryRows, sql, type Queryable } from '@shopstream/db';
import { open, seal } from './aead.js';
import type { ContactKeys, DataKey } from './dataKeys.js';

/** What a sealed conversation's text is bound to: it opens only in its own conversation, for its own contact. */
const conversationAad = (shopId: string, conversationId: string, contactId: string) => `conversation/${shopId}/${conversationId}/${contactId}`;
/** What a sealed message's text is bound to: its own message of its own conversation, for its contact. */
const messageAad = (shopId: string, conversationId: string, messageId: string, contactId: string) =>
  `message/${shopId}/${conversationId}/${messageId}/${contactId}`;

const part = (k: DataKey, plaintext: string, aad: string) => {
  const s = seal(k.key, plaintext, aad);
  return { alg: 'A256GCM' as const, key_id: k.keyId, iv: s.iv, data: s.data };
};

/** A conversation.upserted with a contact, its free text (title, summary, last_message_content) sealed under `k`. */
export function sealConversationUpserted(
  k: DataKey,
  r: Extract<ConversationRecord, { type: 'conversation.upserted' }> & { conversation: { contact_id: string } },
): SealedConversationUpserted {
  const { title, summary, last_message_content, ...plain } = r.conversation;
  const text = JSON.stringify({ title, summary, last_message_content });
  return {
    type: r.type,
    shop_id: r.shop_id,
    conversation: { ...plain, contact_id: r.conversation.contact_id },
    sealed: part(k, text, conversationAad(r.shop_id, r.conversation.id, r.conversation.contact_id)),
  };
}

/** A message.created of a conversation of contact `contactId`, its text sealed under that contact's key `k`. */
export function sealMessageCreated(k: DataKey, contactId: string, r: Extract<ConversationRecord, { type: 'message.created' }>): SealedMessageCreated {
  const { text, ...plain } = r.message;
  return {
    type: r.type,
    shop_id: r.shop_id,
    conversation_id: r.conversation_id,
    contact_id: contactId,
    message: plain,
    sealed: part(k, JSON.stringify({ text }), messageAad(r.shop_id, r.conversation_id, r.message.id, contactId)),
  };
}

/**
 * Seals `conversations` records as the CLI writes them (import, seed): a conversation with a contact has its free
 * text sealed under the contact's data key (made where missing, as ingest makes them), and so have its messages.
 * A message's contact is its conversation's: one met earlier by this sealer, else the one the conversations table
 * holds. A message of a conversation known to neither, a conversation without a contact, and records sealed
 * already are written as they are.
 */
export class ConversationSealer {
  /** The contact of each conversation met, by `<shop>/<conversation>`; null: none. */
  private readonly contactOf = new Map<string, string | null>();
  /** Messages written in plaintext because their conversation was unknown (neither met nor projected). */
  unsealedMessages = 0;

  constructor(
    private readonly db: Queryable,
    private readonly keys: ContactKeys,
  ) {}

  /** The records, in order, sealed where they name a contact (directly or through their conversation). */
  async seal(records: StoredConversationRecord[]): Promise<StoredConversationRecord[]> {
    const k = (shopId: string, conversationId: string) => `${shopId}/${conversationId}`;
    for (const r of records) if (r.type === 'conversation.upserted') this.contactOf.set(k(r.shop_id, r.conversation.id), r.conversation.contact_id);
    const unknown = records.filter((r) => r.type === 'message.created' && !('sealed' in r) && !this.contactOf.has(k(r.shop_id, r.conversation_id)));
    if (unknown.length > 0) {
      const ids = unknown.map((r) => (r.type === 'message.created' ? { shop: r.shop_id, id: r.conversation_id } : null)!);
      const rows = await queryRows(
        this.db,
        sql`SELECT shop_id, id, contact_id FROM conversations
            WHERE (shop_id, id) IN (SELECT * FROM unnest(${ids.map((i) => i.shop)}::uuid[], ${ids.map((i) => i.id)}::uuid[]))`,
        (row) => ({ shop: String(row.shop_id), id: String(row.id), contact: row.contact_id === null ? null : String(row.contact_id) }),
      );
      for (const row of rows) this.contactOf.set(k(row.shop, row.id), row.contact);
    }
    const contactFor = (r: StoredConversationRecord): string | null => {
      if ('sealed' in r) return null;
      if (r.type === 'conversation.upserted') return r.conversation.contact_id;
      return this.contactOf.get(k(r.shop_id, r.conversation_id)) ?? null;
    };
    const byShop = new Map<string, string[]>();
    for (const r of records) {
      const c = contactFor(r);
      if (c) byShop.set(r.shop_id, [...(byShop.get(r.shop_id) ?? []), c]);
    }
    const dataKeys = new Map<string, DataKey>();
    for (const [shop, contacts] of byShop) for (const [c, key] of await this.keys.forContacts(shop, contacts)) dataKeys.set(k(shop, c), key);
    return records.map((r) => {
      if ('sealed' in r) return r;
      const c = contactFor(r);
      if (!c) {
        // A message of a conversation with no contact names no person; one of an unknown conversation might.
        if (r.type === 'message.created' && !this.contactOf.has(k(r.shop_id, r.conversation_id))) this.unsealedMessages++;
        return r;
      }
      const key = dataKeys.get(k(r.shop_id, c))!;
      return r.type === 'conversation.upserted'
        ? sealConversationUpserted(key, { ...r, conversation: { ...r.conversation, contact_id: c } })
        : sealMessageCreated(key, c, r);
    });
  }
}

/** The contact whose data key sealed a record, or null for a plaintext one. */
export const sealedContactOf = (r: StoredConversationRecord): string | null =>
  !('sealed' in r) ? null : r.type === 'conversation.upserted' ? r.conversation.contact_id : r.contact_id;

const isObject = (x: unknown): x is Record<string, unknown> => x !== null && typeof x === 'object' && !Array.isArray(x);
const optionalString = (x: unknown) => x === undefined || typeof x === 'string';

/**
 * An opened conversation's text, checked by its shape (GCM's tag proved that a holder of the contact's key wrote
 * it, as for events); zod only for a part of the wrong shape, to say what is wrong. Only the three fields, as
 * zod's parse would keep.
 */
function conversationText(x: unknown): { title?: string; summary?: string; last_message_content?: string } {
  if (!isObject(x) || !optionalString(x.title) || !optionalString(x.summary) || !optionalString(x.last_message_content)) {
    return sealedConversationFieldsSchema.parse(x);
  }
  const out: { title?: string; summary?: string; last_message_content?: string } = {};
  if (x.title !== undefined) out.title = x.title as string;
  if (x.summary !== undefined) out.summary = x.summary as string;
  if (x.last_message_content !== undefined) out.last_message_content = x.last_message_content as string;
  return out;
}

/** An opened message's text, checked as conversationText is. */
const messageText = (x: unknown): string => (isObject(x) && typeof x.text === 'string' ? x.text : sealedMessageFieldsSchema.parse(x).text);

/**
 * A sealed record opened under its contact's key `k` (the caller checked `k.keyId` against the record's), back in
 * its v1 form; throws when it does not open.
 */
export function openConversationRecord(k: DataKey, r: SealedConversationUpserted | SealedMessageCreated): ConversationRecord {
  if (r.type === 'conversation.upserted') {
    const text = conversationText(JSON.parse(open(k.key, r.sealed, conversationAad(r.shop_id, r.conversation.id, r.conversation.contact_id)).toString('utf8')));
    return { type: r.type, shop_id: r.shop_id, conversation: { ...r.conversation, ...text } };
  }
  const text = messageText(JSON.parse(open(k.key, r.sealed, messageAad(r.shop_id, r.conversation_id, r.message.id, r.contact_id)).toString('utf8')));
  return { type: r.type, shop_id: r.shop_id, conversation_id: r.conversation_id, message: { ...r.message, text } };
}
