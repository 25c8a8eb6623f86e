import type { Router } from 'express';
import { sql } from '@shopstream/db';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { baseUrlOf, createBaseApp, FailedAuthLimiter, finishApp, listen, requireAuth, shedHandler, type ShedAnswer, type OpenApiPart } from '@shopstream/http';
import { buildAsyncApi } from './asyncapi.js';
import { buildOpenApi, docsHandler } from './openapi.js';
import type { ProjectionDefinition } from '@shopstream/projections';
import type { Runtime } from './runtime.js';
import { mountStatus } from './status.js';
import { registerOpsGauges } from './opsGauges.js';

/** What a service module gives the process that runs it. */
export interface StartedService {
  name: string;
  /** Public routes under /v2026-04, mounted behind requireAuth. Absent for consumers. */
  router?: Router;
  /** The service's part of the OpenAPI document. */
  openapi?: OpenApiPart;
  /**
   * Answers some requests before express does, synchronously, or returns false (a producer far over its limit:
   * see ShedHandler in @shopstream/http). The process counts and logs what it answered.
   */
  shed?: (req: IncomingMessage, res: ServerResponse) => ShedAnswer | false;
  /** Extra readiness checks beyond the database and the bus. */
  readiness?: Record<string, () => Promise<boolean>>;
  /** Finishes work in hand (batch, requests) and stops. */
  stop(): Promise<void>;
}

export type ServiceFactory = (rt: Runtime) => Promise<StartedService>;

/**
 * Runs services in this process behind one HTTP port: their routes, /healthz, /readyz, /metrics, /status,
 * /status.json, /openapi.json, /asyncapi.json and /docs. On SIGTERM or SIGINT: stop taking requests, let each service finish, close ports.
 * Services pushed onto `services` after this returns (consumers started in the background) are stopped too.
 */
export async function serve(
  rt: Runtime,
  services: StartedService[],
  opts: {
    port: number;
    host: string;
    name: string;
    readiness?: Record<string, () => Promise<boolean>>;
    /** Every projection of the deployment, for /status and the rebuild gauges (not only this process's). */
    projections?: ProjectionDefinition<unknown>[];
  },
) {
  const projections = opts.projections ?? [];
  const app = createBaseApp({
    service: opts.name,
    logger: rt.logger,
    routes: services.flatMap((s) => s.openapi?.operations.map((op) => op.path) ?? []),
    trustProxy: rt.env.TRUST_PROXY,
    trustRequestId: rt.env.TRUST_REQUEST_ID,
    readiness: {
      database: async () => (await rt.db.query(sql`SELECT 1 AS ok`)).length === 1,
      bus: () => rt.bus.ping(),
      ...Object.assign({}, ...services.map((s) => s.readiness ?? {})),
      ...opts.readiness,
    },
  });
  const doc = buildOpenApi(
    opts.name,
    services.flatMap((s) => (s.openapi ? [s.openapi] : [])),
    rt.env.PUBLIC_BASE_URL,
  );
  // Each document names the origin it was served from (PUBLIC_BASE_URL when set; X-Forwarded-Proto and -Host only
  // under TRUST_PROXY), so /docs "Try it out" and generated clients call this server on whatever port it runs.
  app.get('/openapi.json', (req, res) => {
    res.json({ ...doc, servers: [{ url: baseUrlOf(req, rt.env.PUBLIC_BASE_URL) }] });
  });
  const topicsDoc = buildAsyncApi(rt.topics, rt.env.KAFKA_BROKERS);
  app.get('/asyncapi.json', (req, res) => {
    const origin = baseUrlOf(req, rt.env.PUBLIC_BASE_URL);
    const info = topicsDoc.info as Record<string, unknown>;
    res.json({
      ...topicsDoc,
      info: { ...info, externalDocs: { description: "This deployment's HTTP API (OpenAPI at /openapi.json)", url: `${origin}/docs` } },
    });
  });
  app.use('/docs', docsHandler());
  mountStatus(app, rt, opts.name, projections);
  const removeOpsGauges = registerOpsGauges(rt.db, {
    topics: [...new Set(projections.flatMap((p) => p.emits(rt.topics).map((e) => e.topic)))],
    projections: projections.map((p) => p.name),
  });
  // Routes under the version prefix all need a key and a shop; health and docs above do not.
  rt.apiKeys.failures ??= new FailedAuthLimiter({ burst: rt.env.AUTH_FAILURE_BURST, perMinute: rt.env.AUTH_FAILURES_PER_MINUTE });
  app.use('/v2026-04', requireAuth(rt.apiKeys));
  for (const s of services) if (s.router) app.use('/v2026-04', s.router);
  finishApp(
    app,
    services.flatMap((s) => s.openapi?.operations.map((op) => ({ method: op.method, path: op.path })) ?? []),
  );
  const server = await listen(
    app,
    opts.port,
    opts.host,
    rt.logger,
    {
      headersTimeoutMs: rt.env.HTTP_HEADERS_TIMEOUT_MS,
      requestTimeoutMs: rt.env.HTTP_REQUEST_TIMEOUT_MS,
      keepAliveTimeoutMs: rt.env.HTTP_KEEP_ALIVE_TIMEOUT_MS,
      backlog: rt.env.HTTP_BACKLOG,
    },
    shedHandler(
      opts.name,
      rt.logger,
      services.flatMap((s) => (s.shed ? [s.shed] : [])),
    ),
  );
  let stopping: Promise<void> | null = null;
  const stop = () =>
    (stopping ??= (async () => {
      rt.logger.info('stopping: draining requests and work in hand');
      await server.close(rt.env.SHUTDOWN_TIMEOUT_MS);
      removeOpsGauges();
      for (const s of [...services].reverse()) await s.stop().catch((e) => rt.logger.error({ err: e, service: s.name }, 'stop failed'));
      await rt.close();
      rt.logger.info('stopped');
    })());
  return { server, stop };
}

/**
 * Call first, before start-up: SIGTERM/SIGINT then run the stop given to `started` once, and exit (0, or 1
 * when stopping failed). A signal during start-up is held until the service is up, then it stops at once,
 * drained like any other stop (without this, a signal then took its default action, and as a container's
 * PID 1 it was ignored until the SIGKILL). A second signal exits at once.
 */
export function exitOnSignals(): { started(stop: () => Promise<void>): void } {
  let stop: (() => Promise<void>) | null = null;
  let held: NodeJS.Signals | null = null;
  let signalled = false;
  const run = (sig: NodeJS.Signals) =>
    stop!().then(
      () => process.exit(0),
      (e) => {
        console.error(`stop after ${sig} failed`, e);
        process.exit(1);
      },
    );
  const onSignal = (sig: NodeJS.Signals) => {
    if (signalled) process.exit(130);
    signalled = true;
    if (stop) void run(sig);
    else {
      held = sig;
      console.error(`${sig} during start-up: stopping as soon as the service is up (again to exit at once)`);
    }
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return {
    started(s) {
      stop = s;
      if (held) void run(held);
    },
  };
}
