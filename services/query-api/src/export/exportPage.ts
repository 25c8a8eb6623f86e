import { z } from 'zod';
import { queryRows, sql, type Queryable, type SQLQuery } from '@shopstream/db';
import { conversationResolutions, conversationStatuses, conversationTypes, type Conversation, type ConversationResolution } from '@shopstream/contracts';
import { readKeysetPage, type KeysetSource, type PageDirection } from '@shopstream/http';
import { keysetOrder, type Position } from '../keysetPager.js';
import { formatMicros, type Window } from './exportRange.js';

/** The filters of one export request, resolved: AND-combined. */
export interface ExportFilters {
  shopId: string;
  agentId?: string;
  contactId?: string;
  contactIdIn?: string[];
  id?: string;
  idIn?: string[];
  resolution?: ConversationResolution;
  resolutionIn?: string[];
  createdAt?: Window;
  lastMessageAt?: Window;
  updatedAt?: Window;
}

/**
 * The column the pages are ordered by, with id: updated_at when an updated_at window is given (an incremental
 * pull walks what changed in the order it changed), created_at otherwise.
 */
export type OrderColumn = 'created_at' | 'updated_at';
export const orderColumnOf = (f: ExportFilters): OrderColumn => (f.updatedAt ? 'updated_at' : 'created_at');

/** A position in the (order column, id) order: the column's value as RFC 3339 text with microseconds. */
export type Key = Position;

export interface PageRequest {
  filters: ExportFilters;
  direction: PageDirection;
  /** Start after (next) or before (prev) this key; null starts at the first (next) or last (prev) result. */
  after: Key | null;
  limit: number;
}

export interface PageResult {
  conversations: Conversation[];
  /** Keys of the first and last result, for the links. */
  first: Key | null;
  last: Key | null;
  /** Whether results exist before the first and after the last of this page (for an empty page: at all). */
  hasBefore: boolean;
  hasAfter: boolean;
}

// Values in these literals were checked to be uuids or enum members, so no quoting is needed.
const arrayLiteral = (values: string[]) => `{${values.join(',')}}`;

function whereOf(f: ExportFilters): SQLQuery {
  const w: SQLQuery[] = [sql`shop_id = ${f.shopId}`];
  if (f.agentId) w.push(sql`agent_id = ${f.agentId}`);
  if (f.contactId) w.push(sql`contact_id = ${f.contactId}`);
  if (f.contactIdIn) w.push(sql`contact_id = ANY(${arrayLiteral(f.contactIdIn)}::uuid[])`);
  if (f.id) w.push(sql`id = ${f.id}`);
  if (f.idIn) w.push(sql`id = ANY(${arrayLiteral(f.idIn)}::uuid[])`);
  if (f.resolution) w.push(sql`resolution = ${f.resolution}`);
  if (f.resolutionIn) w.push(sql`resolution = ANY(${arrayLiteral(f.resolutionIn)}::text[])`);
  if (f.createdAt) w.push(sql`created_at >= ${formatMicros(f.createdAt.start)}::timestamptz AND created_at < ${formatMicros(f.createdAt.end)}::timestamptz`);
  if (f.lastMessageAt)
    w.push(sql`last_message_at >= ${formatMicros(f.lastMessageAt.start)}::timestamptz AND last_message_at < ${formatMicros(f.lastMessageAt.end)}::timestamptz`);
  if (f.updatedAt) w.push(sql`updated_at >= ${formatMicros(f.updatedAt.start)}::timestamptz AND updated_at < ${formatMicros(f.updatedAt.end)}::timestamptz`);
  return sql.join(w, sql` AND `);
}

const text = (col: string) => sql`to_char(${sql.ident(col)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** Milliseconds when the microseconds are zero: `...05.120Z` rather than `...05.120000Z`. */
const shortTs = (s: string): string => s.replace(/\.(\d{3})000Z$/, '.$1Z');
const tsOrNull = (s: string | null): string | null => (s === null ? null : shortTs(s));

const nullableText = z.string().nullable();
/**
 * A row of conversations as `fetch` selects it: timestamps as text (`text` above), the jsonb columns as the
 * conversation projector stored them from validated records (typed here, not validated again).
 */
const conversationRow = z.object({
  id: z.string(),
  agent_id: nullableText,
  contact_id: nullableText,
  user_id: nullableText,
  created_at: z.string(),
  updated_at: z.string(),
  escalation_time: nullableText,
  start_time: nullableText,
  last_message_at: nullableText,
  resolved_at: nullableText,
  last_message_content: nullableText,
  summary: nullableText,
  title: nullableText,
  flags: z.custom<Conversation['flags']>(),
  tags: z.custom<Conversation['tags']>(),
  intent: z.custom<Conversation['intent']>(),
  topic: z.custom<Conversation['topic']>(),
  resolution: z.enum(conversationResolutions).nullable(),
  status: z.enum(conversationStatuses).nullable(),
  type: z.enum(conversationTypes),
});
type Row = z.infer<typeof conversationRow> & { position: Key };

/** A row of conversation_messages as `withMessages` selects it. */
const messageRow = z.object({ conversation_id: z.string(), id: z.string(), created_at: z.string(), text: z.string() });

/**
 * The export as a keyset source: one page in at most three statements, whatever its size: the conversations
 * (a range scan of the (shop_id, created_at, id) or (shop_id, updated_at, id) index), all their messages, and,
 * for a page reached by a cursor, whether anything lies on the far side of it.
 */
export function exportSource(db: Queryable, filters: ExportFilters): KeysetSource<Row, Key, Conversation> {
  const where = whereOf(filters);
  const column = orderColumnOf(filters);
  // Qualified: unqualified, ORDER BY would take the formatted column of the select list, and no index.
  const ordered = sql.ident('c', column);
  return {
    async fetch(q) {
      const { bound, order } = keysetOrder(ordered, sql`c.id`, q, 'asc');
      return queryRows(
        db,
        sql`
        SELECT id, agent_id, contact_id, user_id, ${text('created_at')} AS created_at, ${text('updated_at')} AS updated_at,
          ${text('escalation_time')} AS escalation_time, ${text('start_time')} AS start_time,
          ${text('last_message_at')} AS last_message_at, ${text('resolved_at')} AS resolved_at,
          last_message_content, summary, title, flags, tags, intent, topic, resolution, status, type
        FROM conversations c WHERE ${where} AND ${bound} ${order} LIMIT ${q.take}`,
        (row): Row => {
          const r = conversationRow.parse(row);
          return { ...r, position: [r[column], r.id] };
        },
      );
    },
    async behind({ edge, direction }) {
      // The far side of the page's edge: the other direction from it (the whole listing for an empty page).
      const { bound } = keysetOrder(ordered, sql`c.id`, { after: edge, direction: direction === 'next' ? 'prev' : 'next' }, 'asc');
      return (await db.query(sql`SELECT 1 AS x FROM conversations c WHERE ${where} AND ${bound} LIMIT 1`)).length > 0;
    },
    present: (page) => withMessages(db, filters.shopId, page),
  };
}

/** One page; the export's route reads the same source through the pager, with cursors. */
export async function fetchExportPage(db: Queryable, p: PageRequest): Promise<PageResult> {
  const { results, ...rest } = await readKeysetPage(exportSource(db, p.filters), { after: p.after, direction: p.direction, limit: p.limit });
  return { conversations: results, ...rest };
}

async function withMessages(db: Queryable, shopId: string, page: Row[]): Promise<Conversation[]> {
  const ids = page.map((r) => r.id);
  const messageRows =
    ids.length === 0
      ? []
      : await queryRows(
          db,
          sql`
          SELECT conversation_id, id, ${text('created_at')} AS created_at, text FROM conversation_messages m
          WHERE shop_id = ${shopId} AND conversation_id = ANY(${arrayLiteral(ids)}::uuid[])
          ORDER BY m.conversation_id, m.created_at, m.id`,
          messageRow,
        );
  const messages = new Map<string, Conversation['messages']>();
  for (const m of messageRows) {
    const list = messages.get(m.conversation_id) ?? [];
    list.push({ id: m.id, created_at: shortTs(m.created_at), text: m.text });
    messages.set(m.conversation_id, list);
  }
  // Built in the interface's field order; optional fields that are not typed "or null" are omitted when absent.
  const conversations = page.map((r): Conversation => ({
    id: r.id,
    agent_id: r.agent_id,
    contact_id: r.contact_id,
    user_id: r.user_id,
    created_at: shortTs(r.created_at),
    updated_at: shortTs(r.updated_at),
    escalation_time: tsOrNull(r.escalation_time),
    start_time: tsOrNull(r.start_time),
    last_message_at: tsOrNull(r.last_message_at),
    resolved_at: tsOrNull(r.resolved_at),
    ...(r.last_message_content !== null ? { last_message_content: r.last_message_content } : {}),
    ...(r.summary !== null ? { summary: r.summary } : {}),
    ...(r.title !== null ? { title: r.title } : {}),
    flags: r.flags,
    tags: r.tags,
    intent: r.intent,
    topic: r.topic,
    messages: messages.get(r.id) ?? [],
    ...(r.resolution !== null ? { resolution: r.resolution } : {}),
    ...(r.status !== null ? { status: r.status } : {}),
    type: r.type,
  }));
  return conversations;
}
