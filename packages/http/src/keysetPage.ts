import { createHash } from 'node:crypto';
import type { Request } from 'express';
import { z } from 'zod';
import { ApiError } from './errors.js';
import { baseUrlOf, cursorCodec, pageLink, type CursorCodec } from './cursor.js';

export type PageDirection = 'next' | 'prev';

/** Time windows a listing resolved at its first page (`[start, end]` in µs), kept as they were by every later page. */
export type PinnedWindows = Record<string, [number, number]>;

/**
 * The one cursor of every keyset listing (the export and the lists): the direction, the position it starts
 * after or before (the boundary row's sort key; null for the start, or the end going back), a fingerprint of
 * what the listing is pinned to (the shop, the list, its filters as written) and the windows they resolved
 * to at the first page. The export's cursors have had this form from the start, so those handed out stay valid.
 */
export interface KeysetCursor<P> {
  v: 1;
  d: PageDirection;
  k: P | null;
  f: string;
  w?: PinnedWindows;
}

const window = z.tuple([z.number().int(), z.number().int()]);

/** The signed codec of {@link KeysetCursor}s whose position has the given schema (e.g. a [timestamp, id] tuple). */
export function keysetCursorCodec<P>(secret: string, position: z.ZodType<P>): CursorCodec<KeysetCursor<P>> {
  const schema = z.object({ v: z.literal(1), d: z.enum(['next', 'prev']), k: position.nullable(), f: z.string(), w: z.record(z.string(), window).optional() });
  return cursorCodec(secret, schema as z.ZodType<KeysetCursor<P>>);
}

/** A short, stable digest of what a listing is pinned to: a cursor used with anything else no longer matches. */
export function pinFingerprint(pins: Record<string, unknown>): string {
  const sorted = Object.keys(pins)
    .sort()
    .map((k) => [k, pins[k]]);
  return createHash('sha256').update(JSON.stringify(sorted)).digest('base64url').slice(0, 22);
}

/** What the pager asks the store for: at most `take` rows strictly past `after` in the direction the page goes. */
export interface PageQuery<P> {
  /** null: from the start (next) or from the end (prev). */
  after: P | null;
  /** `prev` walks back: nearest first, i.e. in reverse page order. */
  direction: PageDirection;
  take: number;
  windows?: PinnedWindows;
}

/** How to read one page of a listing: the store's side of the pager. */
export interface KeysetSource<Row extends { position: P }, P, Out> {
  /** Each row carries its own keyset `position`. */
  fetch(q: PageQuery<P>): Promise<Row[]>;
  /**
   * Whether rows lie behind the page, on the side its cursor came from (`edge`: the page's first row going
   * next, its last going back; null when the page is empty). Default: yes, the cursor came from there.
   */
  behind?(q: { edge: P | null; direction: PageDirection; windows: PinnedWindows | undefined }): Promise<boolean>;
  /** The page's rows as answered, run beside `behind`. Default: the rows without their position. */
  present?(rows: Row[]): Out[] | Promise<Out[]>;
}

export interface KeysetWindow<P, Out> {
  results: Out[];
  /** Positions of the first and last result (null on an empty page). */
  first: P | null;
  last: P | null;
  /** Whether results exist before the first and after the last of this page (for an empty page: at all). */
  hasBefore: boolean;
  hasAfter: boolean;
}

const withoutPosition = <Row extends { position: unknown }>({ position: _p, ...rest }: Row) => rest;

/**
 * The paging itself, cursors aside: `limit` rows strictly past `after` in `direction` (null: from the start
 * going next, from the end going back), in page order, and whether more lie on either side. At most the
 * fetch, then `present` beside `behind` (only for a page reached from a position).
 */
export async function readKeysetPage<Row extends { position: P }, P, Out = Omit<Row, 'position'>>(
  source: KeysetSource<Row, P, Out>,
  p: { after: P | null; direction: PageDirection; limit: number; windows?: PinnedWindows; fromCursor?: boolean },
): Promise<KeysetWindow<P, Out>> {
  const rows = await source.fetch({ after: p.after, direction: p.direction, take: p.limit + 1, windows: p.windows });
  const more = rows.length > p.limit;
  const page = rows.slice(0, p.limit);
  if (p.direction === 'prev') page.reverse();
  const first = page.length > 0 ? page[0].position : null;
  const last = page.length > 0 ? page[page.length - 1].position : null;
  const fromCursor = p.fromCursor ?? p.after !== null;
  const [results, behind] = await Promise.all([
    source.present ? source.present(page) : (page.map(withoutPosition) as Out[]),
    // Behind the page (where the cursor came from) there are results unless nothing lies there any more.
    !fromCursor ? false : source.behind ? source.behind({ edge: p.direction === 'next' ? first : last, direction: p.direction, windows: p.windows }) : true,
  ]);
  return { results, first, last, hasBefore: p.direction === 'next' ? behind : more, hasAfter: p.direction === 'next' ? more : behind };
}

export interface KeysetPageOptions<Row extends { position: P }, P, Out> extends KeysetSource<Row, P, Out> {
  req: Request;
  publicBaseUrl: string | undefined;
  codec: CursorCodec<KeysetCursor<P>>;
  /** The `cursor` query parameter, if given. */
  cursor: string | undefined;
  limit: number;
  /**
   * What the listing is pinned to, fingerprinted into the cursor: the shop, which list, the filters in a
   * canonical form. A cursor made for other pins (another list, shop, flow, filters) is a 400 `invalid_cursor`.
   */
  pins: Record<string, unknown>;
  /** The query parameters the links repeat, in this order, before limit and cursor; undefined ones are left out. */
  query: Record<string, string | undefined>;
  /** The path of the links. Default: the request's. */
  path?: string;
  /** Windows to resolve at the first page (none given by a cursor) and pin in every cursor after it. */
  windows?: () => PinnedWindows;
}

export interface KeysetPage<Out> {
  results: Out[];
  next: string | null;
  previous: string | null;
}

/**
 * One page of a keyset-paginated listing with absolute `next`/`previous` links: the one pager of the export and
 * of every list. A cursor altered, forged, or used with other pins is a 400 `invalid_cursor`.
 */
export async function keysetPage<Row extends { position: P }, P, Out = Omit<Row, 'position'>>(o: KeysetPageOptions<Row, P, Out>): Promise<KeysetPage<Out>> {
  const f = pinFingerprint(o.pins);
  const at = o.cursor === undefined ? null : o.codec.decode(o.cursor);
  if (at && at.f !== f) {
    throw new ApiError('invalid_cursor', 'The cursor belongs to other filters (or another shop): repeat the filters of the link it came from.', {
      cursor: 'Made for other filters.',
    });
  }
  const direction = at?.d ?? 'next';
  const after = at?.k ?? null;
  // Resolved once, at the first page: every later page keeps these bounds, so a backfill does not drift while it pages.
  const windows = at ? at.w : o.windows?.();
  const page = await readKeysetPage(o, { after, direction, limit: o.limit, windows, fromCursor: at !== null });
  const base = baseUrlOf(o.req, o.publicBaseUrl);
  const path = o.path ?? o.req.originalUrl.split('?')[0];
  const link = (d: PageDirection, k: P | null) =>
    pageLink(base, path, { ...o.query, limit: o.limit, cursor: o.codec.encode({ v: 1, d, k, f, ...(windows ? { w: windows } : {}) }) });
  // An empty page goes on from where its cursor stood.
  return {
    results: page.results,
    next: page.hasAfter ? link('next', page.last ?? after) : null,
    previous: page.hasBefore ? link('prev', page.first ?? after) : null,
  };
}
