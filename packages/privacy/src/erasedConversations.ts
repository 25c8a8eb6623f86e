import type { ConversationRecord, StoredConversationRecord } from '@shopstream/contracts';
import { sql, type Queryable } from '@shopstream/db';
import { contactStates, type KeyCache } from './dataKeys.js';
import { openConversationRecord, sealedContactOf } from './sealConversations.js';
import { erasedRecords } from './sealEvents.js';

/**
 * The `conversations` records of a batch, opened, less those of erased contacts, in the caller's transaction
 * (contactStates: an erasure in flight is waited for). A sealed record (conversation-record.v2, the CLI's) opens
 * under its contact's live key; one whose key is gone is applied as erased. Records upstream producers write in
 * plaintext cannot be shredded: for them the projector consults erased_contacts, so a rebuild brings nothing
 * back. A conversation of an erased contact joins erased_conversations (with any message that came before it
 * deleted), so its messages, which may carry no contact, are left out too.
 */
export async function openConversationRecords(
  tx: Queryable,
  cache: KeyCache,
  stored: StoredConversationRecord[],
  log: { error(obj: object, msg: string): void },
): Promise<ConversationRecord[]> {
  if (stored.length === 0) return [];
  const refs = stored.flatMap((r) => {
    const c = sealedContactOf(r) ?? (r.type === 'conversation.upserted' ? r.conversation.contact_id : null);
    return c ? [{ shop_id: r.shop_id, contact_id: c }] : [];
  });
  const states = await contactStates(tx, cache, refs);
  const k = (shopId: string, id: string) => `${shopId}/${id}`;
  const dropped = new Map<string, { shop_id: string; id: string }>();
  const records: ConversationRecord[] = [];
  for (const r of stored) {
    const contact = sealedContactOf(r);
    if (contact === null || !('sealed' in r)) {
      records.push(r as ConversationRecord);
      continue;
    }
    const key = states.key(r.shop_id, contact);
    if (states.erased(r.shop_id, contact)) {
      erasedRecords.inc({ reason: 'erased' });
      if (r.type === 'conversation.upserted') dropped.set(k(r.shop_id, r.conversation.id), { shop_id: r.shop_id, id: r.conversation.id });
      continue;
    }
    if (!key || key.keyId !== r.sealed.key_id) {
      erasedRecords.inc({ reason: 'no_key' });
      continue;
    }
    try {
      records.push(openConversationRecord(key, r));
    } catch (e) {
      // Not a crash of the projector (the partition would stop): the record is counted, logged and skipped.
      erasedRecords.inc({ reason: 'unopenable' });
      log.error({ err: e, shop_id: r.shop_id }, 'a conversations record did not open under its contact key: skipped');
    }
  }
  for (const r of records) {
    if (r.type === 'conversation.upserted' && r.conversation.contact_id && states.erased(r.shop_id, r.conversation.contact_id)) {
      dropped.set(k(r.shop_id, r.conversation.id), { shop_id: r.shop_id, id: r.conversation.id });
    }
  }
  const conversationIds = records.map((r) => ({ shop_id: r.shop_id, id: r.type === 'conversation.upserted' ? r.conversation.id : r.conversation_id }));
  const known = await tx.query(sql`
    SELECT e.shop_id, e.conversation_id FROM erased_conversations e
    WHERE (e.shop_id, e.conversation_id) IN (SELECT * FROM unnest(${conversationIds.map((c) => c.shop_id)}::uuid[], ${conversationIds.map((c) => c.id)}::uuid[]))`);
  const erased = new Set(known.map((r) => k(String(r.shop_id), String(r.conversation_id))));
  const fresh = [...dropped.values()].filter((d) => !erased.has(k(d.shop_id, d.id)));
  if (fresh.length > 0) {
    const shops = fresh.map((d) => d.shop_id);
    const ids = fresh.map((d) => d.id);
    await tx.query(sql`
      INSERT INTO erased_conversations (shop_id, conversation_id) SELECT * FROM unnest(${shops}::uuid[], ${ids}::uuid[]) ON CONFLICT DO NOTHING`);
    await tx.query(sql`
      DELETE FROM conversation_messages m USING unnest(${shops}::uuid[], ${ids}::uuid[]) AS d(shop_id, id)
      WHERE m.shop_id = d.shop_id AND m.conversation_id = d.id`);
  }
  for (const d of dropped.keys()) erased.add(d);
  if (erased.size === 0) return records;
  return records.filter((r) => !erased.has(k(r.shop_id, r.type === 'conversation.upserted' ? r.conversation.id : r.conversation_id)));
}
