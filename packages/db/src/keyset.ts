import { sql, type SQLQuery } from './db.js';

/** Keyset position of a listing: the sort timestamp as text Postgres reads back exactly (keeps microseconds) and the row id. */
export type Position = [string, string];

/** What the pager (`keysetPage` in @shopstream/http) asks a store for: at most `take` rows strictly past `after`. */
export type PageQuery = { after: Position | null; direction: 'next' | 'prev'; take: number };

/**
 * The bound and the order of a listing sorted on (ts, id), `asc` (oldest first, the export) or `desc` (newest
 * first, the lists): rows strictly past `after` in the direction the page goes (`prev` walks back, nearest
 * first). The bound is a condition, TRUE without `after`.
 */
export function keysetOrder(ts: SQLQuery, id: SQLQuery, q: Pick<PageQuery, 'after' | 'direction'>, sort: 'asc' | 'desc'): { bound: SQLQuery; order: SQLQuery } {
  const ascending = (sort === 'asc') === (q.direction === 'next');
  const bound =
    q.after === null
      ? sql`TRUE`
      : ascending
        ? sql`(${ts}, ${id}) > (${q.after[0]}::timestamptz, ${q.after[1]}::uuid)`
        : sql`(${ts}, ${id}) < (${q.after[0]}::timestamptz, ${q.after[1]}::uuid)`;
  const order = ascending ? sql`ORDER BY ${ts} ASC, ${id} ASC` : sql`ORDER BY ${ts} DESC, ${id} DESC`;
  return { bound, order };
}

/** {@link keysetOrder} newest first, the bound as an `AND ...` clause (empty without `after`). */
export function newestFirst(ts: SQLQuery, id: SQLQuery, q: PageQuery): { bound: SQLQuery; order: SQLQuery } {
  const { bound, order } = keysetOrder(ts, id, q, 'desc');
  return { bound: q.after === null ? sql`` : sql`AND ${bound}`, order };
}
