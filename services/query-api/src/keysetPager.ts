import type { Request } from 'express';
import { z } from 'zod';
import type { Position } from '@shopstream/db';
import { keysetCursorCodec, keysetPage, type CursorCodec, type KeysetCursor, type KeysetPage, type KeysetPageOptions } from '@shopstream/http';
import type { QueryContext } from './index.js';
import { cursorSecret } from './cursorSecret.js';

// The keyset SQL (bound and order on (ts, id)) is the db package's, shared with the flows module's store.
export { keysetOrder, newestFirst, type PageQuery, type Position } from '@shopstream/db';

const positionSchema = z.tuple([z.string(), z.string()]) as z.ZodType<Position>;

type Passed = 'req' | 'publicBaseUrl' | 'codec' | 'cursor' | 'limit' | 'pins' | 'query';

export interface ListOptions<Row extends { position: Position }, Out> extends Omit<KeysetPageOptions<Row, Position, Out>, Passed> {
  /** Which listing this is (`flows`, `triggers`, ...): a cursor of one list is refused by every other. Absent for the export (its cursors predate lists). */
  list?: string;
  /** What this listing is filtered by (query and path parameters, e.g. the flow id), canonical: pinned in the cursor. */
  filters: Record<string, unknown>;
  /** The query parameters the links repeat besides limit and cursor. Default: `filters`. */
  query?: Record<string, string | undefined>;
}

/**
 * {@link keysetPage} over {@link Position}s with query-api's cursor secret (CURSOR_SECRET or the one kept in
 * the database, so a cursor works on every replica and after a restart) and the public base URL; 100 rows
 * unless asked. Every cursor pins the shop, the list and its filters: one sent to another list, another flow's
 * or contact's list, with other filters, or with another shop's X-Shop-Id is a 400 `invalid_cursor`.
 */
export function keysetPager(rt: QueryContext) {
  let codec: { secret: string; codec: CursorCodec<KeysetCursor<Position>> } | undefined;
  const codecOf = (secret: string) => (codec?.secret === secret ? codec : (codec = { secret, codec: keysetCursorCodec(secret, positionSchema) })).codec;
  return async <Row extends { position: Position }, Out = Omit<Row, 'position'>>(
    req: Request,
    q: { cursor?: string; limit?: number },
    { list, filters, query, ...o }: ListOptions<Row, Out>,
  ): Promise<KeysetPage<Out>> =>
    keysetPage<Row, Position, Out>({
      ...o,
      req,
      publicBaseUrl: rt.config.PUBLIC_BASE_URL,
      codec: codecOf(await cursorSecret(rt)),
      cursor: q.cursor,
      limit: q.limit ?? 100,
      pins: { ...filters, ...(list !== undefined ? { list } : {}), shop: req.shopId },
      query: query ?? (filters as Record<string, string>),
    });
}
