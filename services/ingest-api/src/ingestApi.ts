import { tracedBus, type Bus } from '@shopstream/bus';
import { ContactKeys, openKeyring } from '@shopstream/privacy';
import { tracingEnabled } from '@shopstream/telemetry';
import type { Worker } from 'node:worker_threads';
import type { KafkaSettings, StartedService } from '@shopstream/runtime';
import { BodyPool, spawnBodyWorker } from './bodyPool.js';
import { createContactResolver } from './contactResolver.js';
import { WorkerPublisher } from './publisher.js';
import { eventRoutes, ingestRateLimiter, shedOverLimit, shedUnknownKeys } from './eventRoutes.js';
import type { IngestContext } from './index.js';

/** The service, the workers of its body pool started by `spawn` (tests: one that crashes). */
export async function ingestApi(rt: IngestContext, spawn?: () => Worker): Promise<StartedService> {
  const keys = new ContactKeys(rt.db, await openKeyring({ env: rt.config, db: rt.db, logger: rt.logger }), { lingerMs: rt.config.INGEST_LINGER_MS });
  // The contacts' keys ride on their look-ups: read with the contacts found, inserted with the contacts made.
  const contacts = createContactResolver(rt.db, { lingerMs: rt.config.INGEST_LINGER_MS, keys });
  const limiter = ingestRateLimiter(rt);
  const bodies =
    rt.config.INGEST_BODY_WORKERS > 0
      ? new BodyPool({
          size: rt.config.INGEST_BODY_WORKERS,
          logger: rt.logger,
          spawn: spawn ?? (() => spawnBodyWorker({ nice: rt.config.INGEST_WORKER_NICE })),
        })
      : undefined;
  const publisher = bodies && rt.kafka && rt.config.INGEST_LARGE_BODY_PRODUCER ? largeBodyPublisher(rt, rt.kafka) : undefined;
  // Traced like the process's bus (runtime.ts): the send's span is the request's child, its traceparent on the records.
  const largeBus = publisher && (tracingEnabled() ? tracedBus({ messagingSystem: 'kafka', publish: publisher.publish.bind(publisher) } as Bus) : publisher);
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
function largeBodyPublisher(rt: IngestContext, kafka: KafkaSettings): WorkerPublisher {
  const { security } = kafka;
  return new WorkerPublisher(
    {
      client: kafka.client,
      brokers: kafka.brokers,
      ...(security.tls || security.sasl ? { security } : {}),
      clientId: `${kafka.clientIdPrefix}-ingest-api-large`,
      replicationFactor: kafka.replicationFactor,
      lingerMs: kafka.lingerMs,
      publishTimeoutMs: kafka.publishTimeoutMs,
      stallMs: kafka.stallMs,
      logLevel: rt.logger.level,
      nice: rt.config.INGEST_WORKER_NICE,
    },
    rt.logger,
  );
}

type Shed = NonNullable<StartedService['shed']>;

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
