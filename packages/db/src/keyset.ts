import { sql, type SQLQuery } from './db.js';

/** Keyset position of a newest-first listing: the sort timestamp as Postgres text (keeps microseconds) and the row id. */
export type Position = [string, string];

export type PageQuery = { after: Position | null; direction: 'next' | 'previous'; take: number };

/**
 * The bound and the order of a newest-first listing on (ts, id): rows strictly past `after`, in the direction
 * the page goes (`previous` walks back towards newer rows, nearest first).
 */
export function newestFirst(ts: SQLQuery, id: SQLQuery, q: PageQuery): { bound: SQLQuery; order: SQLQuery } {
  const bound =
    q.after === null ? sql`` : q.direction === 'next' ? sql`AND (${ts}, ${id}) < (${q.after[0]}::timestamptz, ${q.after[1]}::uuid)` : sql`AND (${ts}, ${id}) > (${q.after[0]}::timestamptz, ${q.after[1]}::uuid)`;
  const order = q.direction === 'next' ? sql`ORDER BY ${ts} DESC, ${id} DESC` : sql`ORDER BY ${ts} ASC, ${id} ASC`;
  return { bound, order };
}
