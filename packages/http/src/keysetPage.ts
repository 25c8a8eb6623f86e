import type { Request } from 'express';
import { z } from 'zod';
import { ApiError } from './errors.js';
import { baseUrlOf, cursorCodec, pageLink, type CursorCodec } from './cursor.js';

export type PageDirection = 'next' | 'previous';

/** What a keyset cursor pins: the boundary row's sort key, the direction, and the filters of the request. */
export interface KeysetCursor<P> {
  position: P;
  direction: PageDirection;
  filters: Record<string, string>;
}

/** A codec for keyset cursors whose position has the given schema (e.g. a [timestamp, id] tuple). */
export function keysetCursorCodec<P>(secret: string, position: z.ZodType<P>): CursorCodec<KeysetCursor<P>> {
  return cursorCodec(secret, z.object({ position, direction: z.enum(['next', 'previous']), filters: z.record(z.string(), z.string()) }) as z.ZodType<KeysetCursor<P>>);
}

export interface KeysetPageOptions<Row extends { position: P }, P> {
  req: Request;
  publicBaseUrl: string | undefined;
  codec: CursorCodec<KeysetCursor<P>>;
  /** The `cursor` query parameter, if given. */
  cursor: string | undefined;
  limit: number;
  /** What the listing is filtered by (query and path parameters): pinned in the cursor. */
  filters: Record<string, string>;
  /** The query parameters the links repeat besides limit and cursor. Default: `filters`. */
  query?: Record<string, string>;
  /**
   * At most `take` rows strictly after `after` in page order (direction next), or strictly before it,
   * nearest first, i.e. in reverse page order (direction previous). `after` null: from the start.
   * Each row carries its own keyset `position`.
   */
  fetch(q: { after: P | null; direction: PageDirection; take: number }): Promise<Row[]>;
}

export interface KeysetPage<Row> {
  results: Row[];
  next: string | null;
  previous: string | null;
}

const sameFilters = (a: Record<string, string>, b: Record<string, string>) => {
  const ka = Object.keys(a).sort();
  const kb = Object.keys(b).sort();
  return ka.length === kb.length && ka.every((k, i) => k === kb[i] && a[k] === b[k]);
};

/**
 * One page of a keyset-paginated listing with absolute `next`/`previous` links. A cursor used with other
 * filters than it was made for is a 400 `invalid_cursor`.
 */
export async function keysetPage<Row extends { position: P }, P>(o: KeysetPageOptions<Row, P>): Promise<KeysetPage<Row>> {
  const at = o.cursor === undefined ? null : o.codec.decode(o.cursor);
  if (at && !sameFilters(at.filters, o.filters)) {
    throw new ApiError('invalid_cursor', 'The cursor was made for other filters: repeat the request that gave it.', { cursor: 'Made for other filters.' });
  }
  const direction = at?.direction ?? 'next';
  const rows = await o.fetch({ after: at?.position ?? null, direction, take: o.limit + 1 });
  const more = rows.length > o.limit;
  const page = rows.slice(0, o.limit);
  if (direction === 'previous') page.reverse();
  const base = baseUrlOf(o.req, o.publicBaseUrl);
  const path = o.req.originalUrl.split('?')[0];
  const link = (direction: PageDirection, position: P) =>
    pageLink(base, path, { ...(o.query ?? o.filters), limit: o.limit, cursor: o.codec.encode({ position, direction, filters: o.filters }) });
  const first = page[0];
  const last = page[page.length - 1];
  // Going forward there is a page before whenever we came from a cursor; going back, one after.
  const hasNext = direction === 'next' ? more : true;
  const hasPrevious = direction === 'previous' ? more : at !== null;
  let next: string | null = null;
  let previous: string | null = null;
  if (hasNext) next = last ? link('next', last.position) : at ? link('next', at.position) : null;
  if (hasPrevious) previous = first ? link('previous', first.position) : at ? link('previous', at.position) : null;
  return { results: page, next, previous };
}
