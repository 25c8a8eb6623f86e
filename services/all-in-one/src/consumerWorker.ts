/**
 * The consumers of an embedded `pnpm start` (activity-projector, flow-matcher, conversation-projector) in a
 * worker thread of their own: their decoding, SQL building and batching no longer share the event loop that
 * answers HTTP, and the process uses a second core. The worker opens its own runtime on the embedded
 * PostgreSQL the main thread started (by its URL: a pool and a Postgres-log bus of its own, woken by NOTIFY
 * like any other process on that database), so it is one more client of the same server and log.
 *
 * Messages from the main thread: `{ type: 'stop' }` (finish work in hand, close, exit) and
 * `{ type: 'metrics', id }` (answered with this thread's registry as JSON, merged into /metrics).
 * To it: `{ type: 'started' }` once every consumer has joined, `{ type: 'metrics', id, metrics }`.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { Env } from '@shopstream/config';
import { openRuntime, type StartedService } from '@shopstream/runtime';
import { registry } from '@shopstream/telemetry';
import { serviceFactories } from './services.js';

export interface ConsumerWorkerData {
  env: Env;
  services: string[];
}

const port = parentPort;
if (!port) throw new Error('consumerWorker.ts runs as a worker thread of `pnpm start`');
const { env, services } = workerData as ConsumerWorkerData;
const rt = await openRuntime(env, 'consumers');
const started: StartedService[] = [];
let stopping: Promise<void> | undefined;
const stop = () =>
  (stopping ??= (async () => {
    for (const s of [...started].reverse()) await s.stop().catch((e) => rt.logger.error({ err: e, service: s.name }, 'stop failed'));
    await rt.close();
  })());

port.on('message', (m: { type: string; id?: number }) => {
  if (m.type === 'stop') void stop().finally(() => port.close());
  else if (m.type === 'metrics') void registry.getMetricsAsJSON().then((metrics) => port.postMessage({ type: 'metrics', id: m.id, metrics }));
});

// A consumer whose start fails (its database busy for a moment) is tried again, a few times, before the
// worker gives up (and with it the process, as a consumer that cannot start did before it had a thread).
for (const name of services) {
  for (let attempt = 1; ; attempt++) {
    if (stopping) break;
    try {
      const s = await serviceFactories[name](rt);
      if (stopping) await s.stop().catch(() => {});
      else started.push(s);
      break;
    } catch (e) {
      if (attempt >= 5) throw e;
      rt.logger.error({ err: e, service: name, attempt }, 'a consumer failed to start; trying again');
      await new Promise((r) => setTimeout(r, 1_000 * 2 ** (attempt - 1)));
    }
  }
}
if (!stopping) port.postMessage({ type: 'started' });
