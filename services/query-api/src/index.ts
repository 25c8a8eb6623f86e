import { erasuresTopic } from '@shopstream/contracts';
import { defineService, envSchema, type ConfigOf, type ServiceContext } from '@shopstream/runtime/define';

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
  // Its code is loaded when it starts: a process that only reads the declarations (the CLI) loads no express.
  start: async (rt) => (await import('./queryApi.js')).queryApiStart(rt),
});

/** Its start on a whole runtime (the context cut from it), for specs that compose services themselves. */
export const startQueryApi = queryApi.start;
