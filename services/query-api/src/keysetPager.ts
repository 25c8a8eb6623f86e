import type { Request } from 'express';
import type { PageQuery, Position } from '@shopstream/db';
import { z } from 'zod';
import { keysetCursorCodec, keysetPage, type KeysetPage } from '@shopstream/http';
import type { Runtime } from '@shopstream/runtime';
import { cursorSecret } from './cursorSecret.js';

// The keyset SQL of newest-first listings is the db package's, shared with the flows module.
export { newestFirst, type PageQuery, type Position } from '@shopstream/db';

const positionSchema = z.tuple([z.string(), z.string()]) as z.ZodType<Position>;

export interface ListOptions<Row> {
  /** Which listing this is (`flows`, `triggers`, ...): a cursor of one list is refused by every other. */
  list: string;
  /** What this listing is filtered by (query and path parameters, e.g. the flow id): pinned in the cursor. */
  filters: Record<string, string>;
  /** The query parameters the links repeat besides limit and cursor. Default: `filters`. */
  query?: Record<string, string>;
  fetch(p: PageQuery): Promise<Row[]>;
}

/**
 * `keysetPage` over {@link Position}s with query-api's cursor secret (the export's: CURSOR_SECRET or the one
 * kept in the database, so a cursor works on every replica and after a restart) and the public base URL;
 * 100 rows unless asked. Every cursor pins the list, the shop and the list's filters: one sent to another
 * list, another flow's or contact's list, or with another shop's X-Shop-Id is a 400 `invalid_cursor`.
 */
export function keysetPager(rt: Runtime) {
  return async <Row extends { position: Position }>(req: Request, q: { cursor?: string; limit?: number }, o: ListOptions<Row>): Promise<KeysetPage<Row>> => {
    const codec = keysetCursorCodec(await cursorSecret(rt), positionSchema);
    return keysetPage({
      req,
      publicBaseUrl: rt.env.PUBLIC_BASE_URL,
      codec,
      cursor: q.cursor,
      limit: q.limit ?? 100,
      filters: { ...o.filters, list: o.list, shop: req.shopId },
      query: o.query ?? o.filters,
      fetch: o.fetch,
    });
  };
}
