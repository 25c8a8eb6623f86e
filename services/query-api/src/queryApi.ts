import { Router } from 'express';
import { openKeyring, startErasureWorker } from '@shopstream/privacy';
import type { StartedService } from '@shopstream/runtime';
import { flowRoutes } from './flows/routes.js';
import { activityRoutes } from './activities/routes.js';
import { exportRoutes } from './export/routes.js';
import { privacyRoutes } from './privacy/routes.js';
import type { QueryContext } from './index.js';

/**
 * query-api's start: the routes of the export, activities, flows and erasures, and the erasure worker (every
 * replica runs one; they share the jobs through the table, docs/privacy.md).
 */
export async function queryApiStart(rt: QueryContext): Promise<StartedService> {
  const keyring = await openKeyring({ env: rt.config, db: rt.db, logger: rt.logger }, { warn: rt.mode === 'distributed' });
  const worker = startErasureWorker({
    db: rt.db,
    bus: rt.bus,
    keyring,
    erasuresTopic: rt.topics.erasures,
    logger: rt.logger,
    pollMs: rt.config.ERASURE_POLL_MS,
  });
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
