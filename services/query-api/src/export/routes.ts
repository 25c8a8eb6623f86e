import { Router, type Request } from 'express';
import { exportPageSchema, exportQuerySchema, type ExportPage, type ExportQuery, MAX_EXPORT_LIMIT } from '@shopstream/contracts';
import { ApiError, baseUrlOf, pageLink, rateLimit, validate, type CursorCodec } from '@shopstream/http';
import type { OpenApiHeaders, OpenApiPart, Runtime } from '@shopstream/runtime';
import type { Queryable } from '@shopstream/db';
import { exportCursorCodec, filterFingerprint, type ExportCursor } from './exportCursor.js';
import { fetchExportPage, type ExportFilters, type Key } from './exportPage.js';
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

export function exportRoutes(rt: Runtime, opts: ExportRoutesOptions = {}): { router: Router; openapi: OpenApiPart } {
  const clock = opts.clock ?? Date.now;
  let codec: Promise<CursorCodec<ExportCursor>> | null = null;
  const cursors = () =>
    (codec ??= exportCursorCodec(rt).catch((e) => {
      codec = null;
      throw e;
    }));

  const router = Router();
  router.get(
    '/conversations/export/',
    rateLimit({ db: rt.db, bucket: 'conversations-export', limit: rt.env.EXPORT_RATE_LIMIT_PER_MINUTE, windowSeconds: 60 }),
    async (req, res, next) => {
      try {
        res.json(await exportPage(req, rt.db, await cursors(), clock, rt.env.PUBLIC_BASE_URL));
      } catch (e) {
        next(e);
      }
    },
  );

  return {
    router,
    openapi: {
      operations: [
        {
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
        },
      ],
    },
  };
}

async function exportPage(req: Request, db: Queryable, codec: CursorCodec<ExportCursor>, clock: () => number, publicBaseUrl: string | undefined): Promise<ExportPage> {
  const q = validate(exportQuerySchema, req.query, 'The query');
  const limit = q.limit ?? MAX_EXPORT_LIMIT;
  const created = q.created_at__range !== undefined ? parseRange('created_at__range', q.created_at__range) : undefined;
  const lastMessage = q.last_message_at__range !== undefined ? parseRange('last_message_at__range', q.last_message_at__range) : undefined;
  const updated = q.updated_at__range !== undefined ? parseRange('updated_at__range', q.updated_at__range) : undefined;

  const fingerprint = filterFingerprint({
    shop: req.shopId,
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
  });

  let direction: 'next' | 'prev' = 'next';
  let after: Key | null = null;
  let windows: { c?: Window; l?: Window; u?: Window };
  if (q.cursor !== undefined) {
    const c = codec.decode(q.cursor);
    if (c.f !== fingerprint) {
      throw new ApiError('invalid_cursor', 'The cursor belongs to other filters (or another shop): repeat the filters of the link it came from.', {
        cursor: 'Made for other filters.',
      });
    }
    direction = c.d;
    after = c.k;
    const win = (w: [number, number] | undefined) => w && { start: w[0], end: w[1] };
    windows = { c: win(c.w.c), l: win(c.w.l), u: win(c.w.u) };
  } else {
    // Resolved once, here: every later page keeps these bounds, so a backfill does not drift while it pages.
    const now = clock() * 1000;
    windows = {
      c: created && resolveRange('created_at__range', created, now),
      l: lastMessage && resolveRange('last_message_at__range', lastMessage, now),
      u: updated && resolveRange('updated_at__range', updated, now),
    };
  }

  const filters: ExportFilters = {
    shopId: req.shopId,
    agentId: q.agent_id,
    contactId: q.contact_id,
    contactIdIn: q.contact_id__in,
    id: q.id,
    idIn: q.id__in,
    resolution: q.resolution,
    resolutionIn: q.resolution__in,
    createdAt: windows.c,
    lastMessageAt: windows.l,
    updatedAt: windows.u,
  };
  const page = await fetchExportPage(db, { filters, direction, after, limit });

  const w: ExportCursor['w'] = {
    ...(windows.c ? { c: [windows.c.start, windows.c.end] as [number, number] } : {}),
    ...(windows.l ? { l: [windows.l.start, windows.l.end] as [number, number] } : {}),
    ...(windows.u ? { u: [windows.u.start, windows.u.end] as [number, number] } : {}),
  };
  const base = baseUrlOf(req, publicBaseUrl);
  const raw: Record<string, string | undefined> = {};
  for (const p of filterParams) raw[p] = typeof req.query[p] === 'string' ? (req.query[p] as string) : undefined;
  const link = (d: 'next' | 'prev', k: Key | null) =>
    pageLink(base, EXPORT_PATH, { ...raw, limit, cursor: codec.encode({ v: 1, d, k, f: fingerprint, w }) });

  return {
    results: page.conversations,
    next: page.hasAfter ? link('next', page.last) : null,
    previous: page.hasBefore ? link('prev', page.first) : null,
  };
}
