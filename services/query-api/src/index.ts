import { Router } from 'express';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { flowRoutes } from './flows/routes.js';
import { activityRoutes } from './activities/routes.js';
import { exportRoutes } from './export/routes.js';

/** query-api: the export, reads of activities and timelines, and flow management. */
export async function startQueryApi(rt: Runtime): Promise<StartedService> {
  const parts = [flowRoutes(rt), activityRoutes(rt), exportRoutes(rt)];
  const router = Router();
  for (const p of parts) router.use(p.router);
  return {
    name: 'query-api',
    router,
    openapi: { operations: parts.flatMap((p) => p.openapi.operations) },
    async stop() {},
  };
}

export { exportRoutes } from './export/routes.js';
