import { eventsTopic } from '@shopstream/contracts';
import { defineService, envSchema, type ConfigOf, type ServiceContext } from '@shopstream/runtime/define';

/** The variables ingest-api reads. */
const ingestConfig = envSchema.pick({
  INGEST_LINGER_MS: true,
  INGEST_BODY_WORKERS: true,
  INGEST_RATE_LIMIT_PER_SECOND: true,
  INGEST_RATE_LIMIT_PER_MINUTE: true,
  INGEST_RATE_LIMIT_CHUNK: true,
  INGEST_RATE_LIMIT_LEASE_TIMEOUT_MS: true,
  INGEST_RATE_LIMIT_HOLD_MS: true,
  INGEST_SEND_PART_BYTES: true,
  INGEST_LARGE_BODY_BYTES: true,
  INGEST_MAX_LARGE_BODIES: true,
  INGEST_LARGE_BODY_WAIT_MS: true,
  INGEST_LARGE_BODY_BYTES_PER_SECOND: true,
  TRUST_PROXY: true,
  TRUST_REQUEST_ID: true,
  INGEST_WORKER_NICE: true,
  INGEST_LARGE_BODY_PRODUCER: true,
  PRIVACY_MASTER_KEY: true,
  PRIVACY_MASTER_KEY_FILE: true,
});
/** What ingest-api's code is given: the process's ports and its configuration slice. */
export type IngestContext = ServiceContext<ConfigOf<typeof ingestConfig>>;

/**
 * ingest-api: the event writes, the hot path producers hit. Contact look-ups of concurrent requests
 * are gathered for INGEST_LINGER_MS, like the Kafka sends. The server drains its requests before stop().
 */
export const ingestApiService = defineService({
  name: 'ingest-api',
  kind: 'http',
  config: ingestConfig,
  migrations: new URL('../migrations', import.meta.url),
  topics: { emits: [eventsTopic] },
  // Its code is loaded when it starts: a process that only reads the declarations (the CLI) loads no express.
  start: async (rt) => (await import('./ingestApi.js')).ingestApi(rt),
});

/** Its start on a whole runtime (the context cut from it), for specs that compose services themselves. */
export const startIngestApi = ingestApiService.start;
