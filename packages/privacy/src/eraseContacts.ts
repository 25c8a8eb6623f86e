import { queryRows, sql, type Queryable } from '@shopstream/db';

/** The projections' tables that hold a contact's data, in the order an erasure empties them. */
const PROJECTION_TABLES = ['activities', 'contact_timeline', 'flow_triggers', 'conversation_messages', 'conversations'] as const;

export interface ErasedContact {
  contactId: string;
  keyId: string | null;
}

/**
 * Erases contacts of a shop in the caller's transaction: destroys their data keys first (waiting for any
 * projector transaction that holds one, see contactStates), records them in erased_contacts, then deletes them
 * from `contacts` and from every projection table, in every schema that has one (a rebuild's generation being
 * built, or one kept with --keep-old). Returns the contacts erased; one already erased is not erased again.
 */
export async function eraseContacts(tx: Queryable, shopId: string, contactIds: string[], jobId: string, erasedAt: string): Promise<ErasedContact[]> {
  if (contactIds.length === 0) return [];
  const already = new Set(
    (await tx.query(sql`SELECT contact_id FROM erased_contacts WHERE shop_id = ${shopId} AND contact_id = ANY(${contactIds}::uuid[])`)).map((r) =>
      String(r.contact_id),
    ),
  );
  const ids = [...new Set(contactIds)].filter((id) => !already.has(id));
  if (ids.length === 0) return [];
  const keys = await queryRows(
    tx,
    sql`DELETE FROM contact_keys WHERE shop_id = ${shopId} AND contact_id = ANY(${ids}::uuid[]) RETURNING contact_id, key_id`,
    (r) => [String(r.contact_id), String(r.key_id)] as const,
  );
  const keyOf = new Map(keys);
  const erased = ids.map((contactId) => ({ contactId, keyId: keyOf.get(contactId) ?? null }));
  await tx.query(sql`
    INSERT INTO erased_contacts (shop_id, contact_id, job_id, key_id, erased_at)
    SELECT ${shopId}::uuid, c, ${jobId}::uuid, k, ${erasedAt}::timestamptz
    FROM unnest(${erased.map((e) => e.contactId)}::uuid[], ${erased.map((e) => e.keyId)}::uuid[]) AS x(c, k)
    ON CONFLICT DO NOTHING`);
  await tx.query(sql`DELETE FROM contacts WHERE shop_id = ${shopId} AND id = ANY(${ids}::uuid[])`);

  const located = await queryRows(
    tx,
    sql`SELECT table_schema, table_name FROM information_schema.tables
        WHERE table_type = 'BASE TABLE' AND table_name = ANY(${[...PROJECTION_TABLES]}::text[])`,
    (r) => ({ schema: String(r.table_schema), table: String(r.table_name) }),
  );
  const schemas = [...new Set(located.map((l) => l.schema))];
  const has = (schema: string, table: string) => located.some((l) => l.schema === schema && l.table === table);
  for (const s of schemas) {
    const t = (table: string) => sql.ident(s, table);
    if (has(s, 'activities') && has(s, 'contact_timeline')) {
      await tx.query(sql`
        DELETE FROM ${t('activities')} a USING ${t('contact_timeline')} tl
        WHERE tl.shop_id = ${shopId} AND tl.contact_id = ANY(${ids}::uuid[]) AND a.shop_id = tl.shop_id AND a.id = tl.activity_id`);
    }
    // Also an activity whose timeline row is missing: the activity names its contact too.
    if (has(s, 'activities')) await tx.query(sql`DELETE FROM ${t('activities')} WHERE shop_id = ${shopId} AND contact_id = ANY(${ids}::uuid[])`);
    if (has(s, 'contact_timeline')) await tx.query(sql`DELETE FROM ${t('contact_timeline')} WHERE shop_id = ${shopId} AND contact_id = ANY(${ids}::uuid[])`);
    if (has(s, 'flow_triggers')) await tx.query(sql`DELETE FROM ${t('flow_triggers')} WHERE shop_id = ${shopId} AND contact_id = ANY(${ids}::uuid[])`);
    if (has(s, 'conversations')) {
      const conversations = (
        await tx.query(sql`DELETE FROM ${t('conversations')} WHERE shop_id = ${shopId} AND contact_id = ANY(${ids}::uuid[]) RETURNING id`)
      ).map((r) => String(r.id));
      if (conversations.length > 0) {
        await tx.query(sql`
          INSERT INTO erased_conversations (shop_id, conversation_id) SELECT ${shopId}::uuid, c FROM unnest(${conversations}::uuid[]) AS c
          ON CONFLICT DO NOTHING`);
      }
    }
  }
  // Messages of every conversation of these contacts, whichever schema held the conversation.
  for (const s of schemas.filter((x) => has(x, 'conversation_messages'))) {
    await tx.query(sql`
      DELETE FROM ${sql.ident(s, 'conversation_messages')} m USING erased_conversations e
      WHERE e.shop_id = ${shopId} AND m.shop_id = e.shop_id AND m.conversation_id = e.conversation_id`);
  }
  return erased;
}

/** Whether the shop holds anything of this contact id: a contact, a key, a timeline entry or a conversation. */
export async function contactIdKnown(tx: Queryable, shopId: string, contactId: string): Promise<boolean> {
  const rows = await tx.query(sql`
    SELECT EXISTS (SELECT 1 FROM contacts WHERE shop_id = ${shopId} AND id = ${contactId})
        OR EXISTS (SELECT 1 FROM contact_keys WHERE shop_id = ${shopId} AND contact_id = ${contactId})
        OR EXISTS (SELECT 1 FROM contact_timeline WHERE shop_id = ${shopId} AND contact_id = ${contactId})
        OR EXISTS (SELECT 1 FROM conversations WHERE shop_id = ${shopId} AND contact_id = ${contactId}) AS known`);
  return rows[0]?.known === true;
}
