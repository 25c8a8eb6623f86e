/**
 * The consumers of an all-in-one `pnpm start` (activity-projector, flow-matcher, conversation-projector) in a
 * worker thread of their own: their decoding, SQL building and batching no longer share the event loop that
 * answers HTTP, and the process uses a second core. The worker opens its own runtime on the PostgreSQL server
 * the main thread uses (the embedded one by its URL, or DATABASE_URL's: a pool of its own) and on the same log
 * (Kafka with clients of its own, or a Postgres-log bus woken by NOTIFY like any other process on that
 * database), so it is one more client of the same server and log.
 *
 * The same runner as every process (runServices, inThread): the main thread's messages `{ type: 'stop' }`,
 * `{ type: 'metrics', id }` and `{ type: 'consumers', id }` are answered there.
 */
import { workerData } from 'node:worker_threads';
import type { Env } from '@shopstream/config';
import { runServices } from '@shopstream/runtime';
import { niceThisThread } from '@shopstream/runtime/thread-priority';
import { migrationSources, services } from './services.js';

export interface ConsumerWorkerData {
  env: Env;
  services: string[];
}

const data = workerData as ConsumerWorkerData;
// Below the event loop that answers HTTP (CONSUMER_THREAD_NICE): on a machine short of cores, producers are
// answered first and the consumers take what is left, their lag showing it (bench/README.md#all-in-one).
niceThisThread(data.env.CONSUMER_THREAD_NICE);
await runServices(
  services.filter((s) => data.services.includes(s.name)),
  { inThread: true, env: data.env, name: 'consumers', migrations: migrationSources },
);
