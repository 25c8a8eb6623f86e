import type { ServiceFactory } from '@shopstream/runtime';
import { createContactResolver } from './contactResolver.js';
import { eventRoutes, ingestRateLimiter, shedOverLimit } from './eventRoutes.js';

export { activityId, activityKey } from './activityId.js';
export { buildRecord } from './recordEvents.js';
export { contactStore } from './contactStore.js';

/**
 * ingest-api: the event writes, the hot path producers hit. Contact look-ups of concurrent requests
 * are gathered for INGEST_LINGER_MS, like the Kafka sends. The server drains its requests before stop().
 */
export const startIngestApi: ServiceFactory = async (rt) => {
  const contacts = createContactResolver(rt.db, { lingerMs: rt.env.INGEST_LINGER_MS });
  const limiter = ingestRateLimiter(rt);
  const { router, openapi } = eventRoutes(rt, contacts, limiter);
  return {
    name: 'ingest-api',
    router,
    openapi,
    shed: shedOverLimit(rt, limiter),
    async stop() {
      await contacts.close();
      await limiter.close();
    },
  };
};
