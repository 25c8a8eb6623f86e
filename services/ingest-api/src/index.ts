import { ContactKeys, openKeyring } from '@shopstream/privacy';
import type { Worker } from 'node:worker_threads';
import type { Runtime, ServiceFactory } from '@shopstream/runtime';
import { BodyPool, spawnBodyWorker } from './bodyPool.js';
import { createContactResolver } from './contactResolver.js';
import { eventRoutes, ingestRateLimiter, shedOverLimit, shedUnknownKeys } from './eventRoutes.js';

/**
 * ingest-api: the event writes, the hot path producers hit. Contact look-ups of concurrent requests
 * are gathered for INGEST_LINGER_MS, like the Kafka sends. The server drains its requests before stop().
 */
export const startIngestApi: ServiceFactory = (rt) => ingestApi(rt);

/** The service, the workers of its body pool started by `spawn` (tests: one that crashes). */
export async function ingestApi(rt: Runtime, spawn: () => Worker = spawnBodyWorker): ReturnType<ServiceFactory> {
  const contacts = createContactResolver(rt.db, { lingerMs: rt.env.INGEST_LINGER_MS });
  const limiter = ingestRateLimiter(rt);
  const keys = new ContactKeys(rt.db, await openKeyring(rt), { lingerMs: rt.env.INGEST_LINGER_MS });
  const bodies = rt.env.INGEST_BODY_WORKERS > 0 ? new BodyPool({ size: rt.env.INGEST_BODY_WORKERS, logger: rt.logger, spawn }) : undefined;
  const { router, openapi } = eventRoutes(rt, contacts, keys, limiter, bodies);
  return {
    name: 'ingest-api',
    router,
    openapi,
    shed: shedOf(shedUnknownKeys(rt), shedOverLimit(rt, limiter)),
    async stop() {
      await contacts.close();
      await keys.close();
      await limiter.close();
      await bodies?.close();
    },
  };
}

type Shed = NonNullable<Awaited<ReturnType<ServiceFactory>>['shed']>;

/** The first of the shed handlers that answers. */
function shedOf(...sheds: (Shed | undefined)[]): Shed {
  const present = sheds.filter((s): s is Shed => s !== undefined);
  return (req, res) => {
    for (const shed of present) {
      const answer = shed(req, res);
      if (answer) return answer;
    }
    return false;
  };
}
