import { Router } from 'express';
import { openKeyring, startErasureWorker } from '@shopstream/privacy';
import { erasuresTopic } from '@shopstream/contracts';
import { defineService, envSchema, type ConfigOf, type ServiceContext } from '@shopstream/runtime';
import { flowRoutes } from './flows/routes.js';
import { activityRoutes } from './activities/routes.js';
import { exportRoutes } from './export/routes.js';
import { privacyRoutes } from './privacy/routes.js';

/** The variables query-api reads. */
const queryConfig = envSchema.pick({
  CURSOR_SECRET: true,
  PUBLIC_BASE_URL: true,
  EXPORT_RATE_LIMIT_PER_MINUTE: true,
  ERASURE_POLL_MS: true,
  PRIVACY_MASTER_KEY: true,
  PRIVACY_MASTER_KEY_FILE: true,
});
/** What query-api's code is given: the process's ports and its configuration slice. */
export type QueryContext = ServiceContext<ConfigOf<typeof queryConfig>>;

/**
 * query-api: the export, reads of activities and timelines, flow management, and erasure jobs: their routes and
 * the worker that runs them (every replica runs one; they share the jobs through the table, docs/privacy.md).
 */
export const queryApi = defineService({
  name: 'query-api',
  kind: 'http',
  config: queryConfig,
  migrations: new URL('../migrations', import.meta.url),
  topics: { emits: [erasuresTopic] },
  async start(rt) {
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
  },
});

export { exportRoutes } from './export/routes.js';
/** One export page without cursors, over any Queryable (a test counts and explains its statements). */
export { fetchExportPage, type ExportFilters, type PageRequest as ExportPageRequest, type PageResult as ExportPageResult } from './export/exportPage.js';

/** Its start on a whole runtime (the context cut from it), for specs that compose services themselves. */
export const startQueryApi = queryApi.start;
