import { tracedBus, type Bus } from '@shopstream/bus';
import { kafkaConnection } from '@shopstream/config';
import { ContactKeys, openKeyring } from '@shopstream/privacy';
import { tracingEnabled } from '@shopstream/telemetry';
import type { Worker } from 'node:worker_threads';
import type { Runtime, ServiceFactory } from '@shopstream/runtime';
import { BodyPool, spawnBodyWorker } from './bodyPool.js';
import { createContactResolver } from './contactResolver.js';
import { WorkerPublisher } from './publisher.js';
import { eventRoutes, ingestRateLimiter, shedOverLimit, shedUnknownKeys } from './eventRoutes.js';

/**
 * ingest-api: the event writes, the hot path producers hit. Contact look-ups of concurrent requests
 * are gathered for INGEST_LINGER_MS, like the Kafka sends. The server drains its requests before stop().
 */
export const startIngestApi: ServiceFactory = (rt) => ingestApi(rt);

/** The service, the workers of its body pool started by `spawn` (tests: one that crashes). */
export async function ingestApi(rt: Runtime, spawn?: () => Worker): ReturnType<ServiceFactory> {
  const contacts = createContactResolver(rt.db, { lingerMs: rt.env.INGEST_LINGER_MS });
  const limiter = ingestRateLimiter(rt);
  const keys = new ContactKeys(rt.db, await openKeyring(rt), { lingerMs: rt.env.INGEST_LINGER_MS });
  const bodies =
    rt.env.INGEST_BODY_WORKERS > 0
      ? new BodyPool({ size: rt.env.INGEST_BODY_WORKERS, logger: rt.logger, spawn: spawn ?? (() => spawnBodyWorker({ nice: rt.env.INGEST_WORKER_NICE })) })
      : undefined;
  const publisher = bodies && rt.env.KAFKA_BROKERS && rt.env.INGEST_LARGE_BODY_PRODUCER ? largeBodyPublisher(rt) : undefined;
  // Traced like the process's bus (runtime.ts): the send's span is the request's child, its traceparent on the records.
  const largeBus = publisher && (tracingEnabled() ? tracedBus({ kind: 'kafka', publish: publisher.publish.bind(publisher) } as Bus) : publisher);
  const { router, openapi } = eventRoutes(rt, contacts, keys, limiter, bodies, largeBus);
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
      await publisher?.close();
    },
  };
}

/** The producer thread of large bodies' records, opened with the process's Kafka settings (runtime.ts). */
function largeBodyPublisher(rt: Runtime): WorkerPublisher {
  const env = rt.env;
  const security = kafkaConnection(env);
  return new WorkerPublisher(
    {
      client: env.KAFKA_CLIENT,
      brokers: env.KAFKA_BROKERS!,
      ...(security.tls || security.sasl ? { security } : {}),
      clientId: `${env.KAFKA_CLIENT_ID}-ingest-api-large`,
      replicationFactor: env.KAFKA_REPLICATION,
      lingerMs: env.INGEST_LINGER_MS,
      publishTimeoutMs: env.INGEST_PUBLISH_TIMEOUT_MS,
      stallMs: env.INGEST_PUBLISH_STALL_MS,
      logLevel: env.LOG_LEVEL,
      nice: env.INGEST_WORKER_NICE,
    },
    rt.logger,
  );
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
