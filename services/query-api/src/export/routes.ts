import type { Request } from 'express';
import { exportPageSchema, exportQuerySchema, type ExportPage, type ExportQuery, MAX_EXPORT_LIMIT } from '@shopstream/contracts';
import { defineRoute, mountRoutes, rateLimit, type OpenApiHeaders, type PinnedWindows } from '@shopstream/http';
import type { QueryContext } from '../index.js';
import type { Queryable } from '@shopstream/db';
import { keysetPager } from '../keysetPager.js';
import { exportSource, type ExportFilters } from './exportPage.js';
import { canonicalRange, parseRange, resolveRange, type Window } from './exportRange.js';

export const EXPORT_PATH = '/v2026-04/conversations/export/';

export interface ExportRoutesOptions {
  /** Now, in ms since the epoch: relative windows are resolved against it. A test freezes it. */
  clock?: () => number;
}

/** The filter parameters, in the order links repeat them. */
const filterParams = [
  'agent_id',
  'contact_id',
  'contact_id__in',
  'id',
  'id__in',
  'resolution',
  'resolution__in',
  'created_at__range',
  'last_message_at__range',
  'updated_at__range',
] as const satisfies readonly (keyof ExportQuery)[];

const rateLimitHeaders = {
  'RateLimit-Limit': { description: 'Requests allowed per window for this API key and shop.', type: 'integer' },
  'RateLimit-Remaining': { description: 'Requests left in the current window.', type: 'integer' },
  'RateLimit-Reset': { description: 'Seconds until the window resets.', type: 'integer' },
  'RateLimit-Policy': 'IETF draft policy, e.g. "default";q=60;w=60.',
  RateLimit: 'IETF draft state, e.g. "default";r=59;t=42.',
} satisfies OpenApiHeaders;

/** The limit is counted after the key and the shop are checked: a 400 invalid_shop has no counter to report. */
const optional = (hs: OpenApiHeaders): OpenApiHeaders =>
  Object.fromEntries(Object.entries(hs).map(([h, d]) => [h, typeof d === 'string' ? { description: d, required: false } : { ...d, required: false }]));

export function exportRoutes(rt: QueryContext, opts: ExportRoutesOptions = {}) {
  const clock = opts.clock ?? Date.now;
  const page = keysetPager(rt);
  return mountRoutes([
    defineRoute({
      method: 'get',
      path: EXPORT_PATH,
      operationId: 'exportConversations',
      summary: 'Export conversations',
      description:
        'Conversations with their messages inlined, ordered by (created_at, id), oldest first, in keyset pages; ' +
        'with updated_at__range, ordered by (updated_at, id): pull `updated_at__range=<last end>,<now>` windows to keep a copy in sync. ' +
        'Follow `next` until it is null. Filters are AND-combined; ranges are half-open (start <= t < end), at most 30 days. ' +
        'The cursor pins the filters and the resolved windows: use it with the same filters only. 60 requests per minute per API key and shop.',
      tags: ['Conversations'],
      query: exportQuerySchema,
      responses: { 200: { description: 'A page of conversations.', schema: exportPageSchema, headers: rateLimitHeaders } },
      errors: [400, 401, 403, 429],
      errorHeaders: {
        400: optional(rateLimitHeaders),
        429: { ...rateLimitHeaders, 'Retry-After': { description: 'Seconds until the window resets: the same as RateLimit-Reset.', type: 'integer' } },
      },
      before: [rateLimit({ db: rt.db, bucket: 'conversations-export', limit: rt.config.EXPORT_RATE_LIMIT_PER_MINUTE, windowSeconds: 60 })],
      async handler(req, res, { query }) {
        res.json(await exportPage(req, rt.db, page, query, clock));
      },
    }),
  ]);
}

async function exportPage(req: Request, db: Queryable, page: ReturnType<typeof keysetPager>, q: ExportQuery, clock: () => number): Promise<ExportPage> {
  const created = q.created_at__range !== undefined ? parseRange('created_at__range', q.created_at__range) : undefined;
  const lastMessage = q.last_message_at__range !== undefined ? parseRange('last_message_at__range', q.last_message_at__range) : undefined;
  const updated = q.updated_at__range !== undefined ? parseRange('updated_at__range', q.updated_at__range) : undefined;
  // The filters as the client wrote them, canonical: pinned in the cursor (with the shop, so the order too).
  const pinned = {
    agent_id: q.agent_id,
    contact_id: q.contact_id,
    contact_id__in: q.contact_id__in?.slice().sort(),
    id: q.id,
    id__in: q.id__in?.slice().sort(),
    resolution: q.resolution,
    resolution__in: q.resolution__in?.slice().sort(),
    created_at__range: created && canonicalRange(created),
    last_message_at__range: lastMessage && canonicalRange(lastMessage),
    updated_at__range: updated && canonicalRange(updated),
  };
  const raw: Record<string, string | undefined> = {};
  for (const p of filterParams) raw[p] = typeof req.query[p] === 'string' ? (req.query[p] as string) : undefined;
  const win = (w: [number, number] | undefined): Window | undefined => w && { start: w[0], end: w[1] };
  const filtersOf = (w: PinnedWindows | undefined): ExportFilters => ({
    shopId: req.shopId,
    agentId: q.agent_id,
    contactId: q.contact_id,
    contactIdIn: q.contact_id__in,
    id: q.id,
    idIn: q.id__in,
    resolution: q.resolution,
    resolutionIn: q.resolution__in,
    createdAt: win(w?.c),
    lastMessageAt: win(w?.l),
    updatedAt: win(w?.u),
  });
  // The windows come from the cursor, or are resolved at the first page: known once the pager asks for rows.
  let built: ReturnType<typeof exportSource> | undefined;
  const source = (w: PinnedWindows | undefined) => (built ??= exportSource(db, filtersOf(w)));
  return page(
    req,
    { cursor: q.cursor, limit: q.limit ?? MAX_EXPORT_LIMIT },
    {
      filters: pinned,
      query: raw,
      path: EXPORT_PATH,
      // Resolved once, at the first page: every later page keeps these bounds, so a backfill does not drift while it pages.
      windows: () => {
        const now = clock() * 1000;
        const pair = (w: Window | undefined): [number, number] | undefined => w && [w.start, w.end];
        const c = pair(created && resolveRange('created_at__range', created, now));
        const l = pair(lastMessage && resolveRange('last_message_at__range', lastMessage, now));
        const u = pair(updated && resolveRange('updated_at__range', updated, now));
        return { ...(c ? { c } : {}), ...(l ? { l } : {}), ...(u ? { u } : {}) };
      },
      fetch: (p) => source(p.windows).fetch(p),
      behind: (p) => source(p.windows).behind!(p),
      present: (rows) => built!.present!(rows),
    },
  );
}
