import type { ServiceFactory } from '@shopstream/runtime';
import { eventRoutes } from './eventRoutes.js';

/** ingest-api: the event writes, the hot path producers hit. Stateless: the server drains its requests on stop. */
export const startIngestApi: ServiceFactory = async (rt) => {
  const { router, openapi } = eventRoutes(rt);
  return { name: 'ingest-api', router, openapi, async stop() {} };
};
