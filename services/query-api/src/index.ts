import { Router } from 'express';
import { openKeyring, startErasureWorker } from '@shopstream/privacy';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { flowRoutes } from './flows/routes.js';
import { activityRoutes } from './activities/routes.js';
import { exportRoutes } from './export/routes.js';
import { privacyRoutes } from './privacy/routes.js';

/**
 * query-api: the export, reads of activities and timelines, flow management, and erasure jobs: their routes and
 * the worker that runs them (every replica runs one; they share the jobs through the table, docs/privacy.md).
 */
export async function startQueryApi(rt: Runtime): Promise<StartedService> {
  const keyring = await openKeyring(rt, { warn: rt.mode === 'distributed' });
  const worker = startErasureWorker({ db: rt.db, bus: rt.bus, keyring, erasuresTopic: rt.topics.erasures, logger: rt.logger, pollMs: rt.env.ERASURE_POLL_MS });
  const parts = [flowRoutes(rt), activityRoutes(rt), exportRoutes(rt), privacyRoutes(rt, keyring, () => worker.kick())];
  const router = Router();
  for (const p of parts) router.use(p.router);
  return {
    name: 'query-api',
    router,
    openapi: { operations: parts.flatMap((p) => p.openapi.operations) },
    async stop() {
      await worker.stop();
    },
  };
}

export { exportRoutes } from './export/routes.js';
/** One export page without cursors, over any Queryable (a test counts and explains its statements). */
export { fetchExportPage, type ExportFilters, type PageRequest as ExportPageRequest, type PageResult as ExportPageResult } from './export/exportPage.js';
