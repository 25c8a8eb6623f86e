import { timingSafeEqual } from 'node:crypto';
import type { Express, RequestHandler } from 'express';
import { projectionStatus, type ProjectionDefinition, type ProjectionStatus } from '@shopstream/projections';
import { ApiError, bearerSecret, ingestAnswers, sendError, type AnswerBucket } from '@shopstream/http';
import { allConsumerStates } from '@shopstream/telemetry';
import type { Runtime } from './runtime.js';
import { STATUS_PAGE } from './statusPage.js';

/** A projection as /status.json shows it: `pnpm cli projections status --json`'s object without the rebuild's error text. */
type ProjectionView = Omit<ProjectionStatus, 'rebuild'> & { rebuild: Omit<NonNullable<ProjectionStatus['rebuild']>, 'error'> | null };

/** The body of GET /status.json. Figures about the service only: no shop id, no record, no key. */
export interface StatusDocument {
  service: string;
  generatedAt: string;
  /** Each projection, as `pnpm cli projections status --json` reports it (null when the log or database did not answer). */
  projections: ProjectionView[] | null;
  /** Why `projections` is null. */
  projectionsError?: string;
  /** This process's ingest answers (POST /v2026-04/events/ and /events/bulk/) by status, per slice of time, oldest first. */
  ingest: { bucketSeconds: number; buckets: AnswerBucket[] };
  /** This process's consumers (every thread): up or not, and since when. */
  consumers: { group: string; up: boolean; since: string }[];
}

const PROJECTIONS_TIMEOUT_MS = 5_000;

async function statusDocument(rt: Runtime, service: string, defs: ProjectionDefinition<unknown>[]): Promise<StatusDocument> {
  let projections: ProjectionView[] | null = null;
  let projectionsError: string | undefined;
  try {
    let timer: NodeJS.Timeout | undefined;
    const all = await Promise.race([
      projectionStatus(defs, { bus: rt.bus, db: rt.db, topics: rt.topics, groupPrefix: rt.env.CONSUMER_GROUP_PREFIX }),
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${PROJECTIONS_TIMEOUT_MS} ms`)), PROJECTIONS_TIMEOUT_MS))),
    ]).finally(() => clearTimeout(timer));
    // A rebuild's error text may quote a record: the page shows that it failed, the CLI shows why.
    projections = all.map((p) => ({ ...p, rebuild: p.rebuild ? (({ error: _error, ...r }) => r)(p.rebuild) : null }));
  } catch (e) {
    projectionsError = `the log or the database did not answer: ${e instanceof Error ? e.constructor.name : 'error'}`;
    rt.logger.warn({ err: e }, 'status: projections unavailable');
  }
  const consumers = (await allConsumerStates())
    .map((c) => ({ group: c.group, up: c.up, since: new Date(c.since).toISOString() }))
    .sort((a, b) => a.group.localeCompare(b.group));
  return {
    service,
    generatedAt: new Date().toISOString(),
    projections,
    ...(projectionsError ? { projectionsError } : {}),
    ingest: { bucketSeconds: ingestAnswers.bucketMs / 1000, buckets: ingestAnswers.snapshot() },
    consumers,
  };
}

/** Open unless STATUS_TOKEN is set; then its value as a Bearer token or `?token=`. */
function requireStatusToken(token: string | undefined): RequestHandler {
  if (!token) return (_req, _res, next) => next();
  const want = Buffer.from(token);
  const same = (given: string | undefined) => {
    if (given === undefined) return false;
    const got = Buffer.from(given);
    return got.length === want.length && timingSafeEqual(got, want);
  };
  return (req, res, next) => {
    const query = typeof req.query.token === 'string' ? req.query.token : undefined;
    if (same(bearerSecret(req.headers.authorization)) || same(query)) return next();
    res.setHeader('WWW-Authenticate', 'Bearer realm="status"');
    sendError(
      res,
      req.id,
      new ApiError('unauthorized', 'The status page needs STATUS_TOKEN: as a Bearer token or ?token=.', { authorization: 'Missing or wrong status token.' }),
    );
  };
}

/**
 * GET /status (an HTML page that fetches /status.json and redraws itself every few seconds; no external
 * asset, no build step) and GET /status.json.
 */
export function mountStatus(app: Express, rt: Runtime, service: string, defs: ProjectionDefinition<unknown>[]): void {
  const guard = requireStatusToken(rt.env.STATUS_TOKEN);
  app.get('/status.json', guard, async (_req, res) => {
    res.setHeader('Cache-Control', 'no-store');
    res.json(await statusDocument(rt, service, defs));
  });
  app.get('/status', guard, (_req, res) => {
    res.setHeader('Content-Type', 'text/html; charset=utf-8');
    res.setHeader('Cache-Control', 'no-store');
    // The page runs its own inline script and style and loads nothing else.
    res.setHeader('Content-Security-Policy', "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:");
    res.send(STATUS_PAGE);
  });
}
