import { sql, type Queryable } from '@shopstream/db';
import { rfc3339Micros, type ConversationRecord, type ConversationUpserted, type MessageCreated } from '@shopstream/contracts';

/**
 * Two versions of a conversation in one batch are compared to the microsecond, as the upsert's `updated_at`
 * check compares them (Date.parse stops at milliseconds, and would let an older version a few microseconds
 * behind win a tie). The record schema admitted both times, so both parse.
 */
const micros = (ts: string): bigint => rfc3339Micros(ts) as bigint;

/**
 * Applies one batch of `conversations` records in a few multi-row statements, whatever the batch size:
 * 1. messages, inserted once by (shop, id): a repeat or a second write of an id changes nothing;
 * 2. conversations, upserted when the record's updated_at is not older than the stored one;
 * 3. last_message_at/_content of every conversation touched, raised to its newest message when that
 *    message is newer than what the row holds (so a message that came first shows once its conversation comes).
 */
export async function applyConversationRecords(tx: Queryable, records: ConversationRecord[]): Promise<void> {
  const upserts = new Map<string, ConversationUpserted>();
  const messages = new Map<string, MessageCreated>();
  for (const r of records) {
    switch (r.type) {
      case 'conversation.upserted': {
        // One statement cannot touch a row twice: keep the version that would win last.
        const k = `${r.shop_id}/${r.conversation.id}`;
        const had = upserts.get(k);
        if (!had || micros(had.conversation.updated_at) <= micros(r.conversation.updated_at)) upserts.set(k, r);
        break;
      }
      case 'message.created': {
        const k = `${r.shop_id}/${r.message.id}`;
        if (!messages.has(k)) messages.set(k, r);
        break;
      }
      default: {
        const never: never = r;
        throw new Error(`unhandled conversation record ${JSON.stringify(never)}`);
      }
    }
  }

  const touched = new Map<string, { shop_id: string; id: string }>();
  const touch = (shopId: string, id: string) => touched.set(`${shopId}/${id}`, { shop_id: shopId, id });

  if (messages.size > 0) {
    const rows = [...messages.values()].map((m) => ({
      shop_id: m.shop_id,
      id: m.message.id,
      conversation_id: m.conversation_id,
      created_at: m.message.created_at,
      text: m.message.text,
    }));
    const inserted = await tx.query(sql`
      INSERT INTO conversation_messages (shop_id, id, conversation_id, created_at, text)
      SELECT shop_id, id, conversation_id, created_at, text
      FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS x(shop_id uuid, id uuid, conversation_id uuid, created_at timestamptz, text text)
      ON CONFLICT (shop_id, id) DO NOTHING
      RETURNING shop_id, conversation_id`);
    for (const r of inserted) touch(String(r.shop_id), String(r.conversation_id));
  }

  if (upserts.size > 0) {
    // A row is the record's conversation as it stands: jsonb_to_recordset takes the columns it names, and
    // reads a field the producer left out (an optional one) as NULL.
    const rows = [...upserts.values()].map(({ shop_id, conversation }) => ({ shop_id, ...conversation }));
    const applied = await tx.query(sql`
      INSERT INTO conversations AS c (shop_id, id, agent_id, contact_id, user_id, created_at, updated_at, escalation_time, start_time,
        resolved_at, last_message_at, last_message_content, last_message_id, summary, title, flags, tags, intent, topic, resolution, status, type)
      SELECT shop_id, id, agent_id, contact_id, user_id, created_at, updated_at, escalation_time, start_time,
        resolved_at, last_message_at, last_message_content, NULL, summary, title, flags, tags, intent, topic, resolution, status, type
      FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS x(shop_id uuid, id uuid, agent_id uuid, contact_id uuid, user_id uuid,
        created_at timestamptz, updated_at timestamptz, escalation_time timestamptz, start_time timestamptz, resolved_at timestamptz,
        last_message_at timestamptz, last_message_content text, summary text, title text, flags jsonb, tags jsonb, intent jsonb, topic jsonb,
        resolution text, status text, type text)
      ON CONFLICT (shop_id, id) DO UPDATE SET
        agent_id = EXCLUDED.agent_id, contact_id = EXCLUDED.contact_id, user_id = EXCLUDED.user_id,
        created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at, escalation_time = EXCLUDED.escalation_time,
        start_time = EXCLUDED.start_time, resolved_at = EXCLUDED.resolved_at, last_message_at = EXCLUDED.last_message_at,
        last_message_content = EXCLUDED.last_message_content, last_message_id = NULL, summary = EXCLUDED.summary,
        title = EXCLUDED.title, flags = EXCLUDED.flags, tags = EXCLUDED.tags, intent = EXCLUDED.intent, topic = EXCLUDED.topic,
        resolution = EXCLUDED.resolution, status = EXCLUDED.status, type = EXCLUDED.type
      WHERE c.updated_at <= EXCLUDED.updated_at
      RETURNING shop_id, id`);
    for (const r of applied) touch(String(r.shop_id), String(r.id));
  }

  if (touched.size > 0) {
    // Ties on created_at go to the larger message id, the same order the export lists messages in;
    // a message at exactly the record's own last_message_at wins, since it brings the content.
    await tx.query(sql`
      UPDATE conversations c
      SET last_message_at = n.created_at, last_message_content = n.text, last_message_id = n.message_id
      FROM (
        SELECT t.shop_id, t.id, m.id AS message_id, m.created_at, m.text
        FROM jsonb_to_recordset(${JSON.stringify([...touched.values()])}::jsonb) AS t(shop_id uuid, id uuid)
        CROSS JOIN LATERAL (
          SELECT id, created_at, text FROM conversation_messages
          WHERE shop_id = t.shop_id AND conversation_id = t.id
          ORDER BY created_at DESC, id DESC LIMIT 1
        ) m
      ) n
      WHERE c.shop_id = n.shop_id AND c.id = n.id
        AND (c.last_message_at IS NULL
          OR n.created_at > c.last_message_at
          OR (n.created_at = c.last_message_at AND (c.last_message_id IS NULL OR n.message_id > c.last_message_id)))`);
  }
}
