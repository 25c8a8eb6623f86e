import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Env } from '@shopstream/config';
import type { ConsumerThread } from '@shopstream/runtime';
import { addConsumerStateSource, addMetricsSource, type ConsumerState, type Logger } from '@shopstream/telemetry';
import type { ConsumerWorkerData } from './consumerWorker.js';

/**
 * Starts the consumers in a worker thread (consumerWorker.ts) connected to the embedded PostgreSQL at
 * `databaseUrl`. `started` settles once they have joined; `stop` finishes their work in hand and ends the
 * thread. The thread's metrics are served by this thread's /metrics. A worker that dies calls `onDied`.
 */
export function startConsumerThread(env: Env, databaseUrl: string, services: string[], logger: Logger, onDied: (err: unknown) => void): ConsumerThread {
  const worker = spawn({ env: { ...env, DATABASE_URL: databaseUrl }, services } satisfies ConsumerWorkerData);
  let stopping = false;
  const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
  const pending = new Map<number, (m: unknown) => void>();
  let nextId = 0;
  let resolveStarted!: () => void;
  let rejectStarted!: (e: unknown) => void;
  const started = new Promise<void>((res, rej) => ((resolveStarted = res), (rejectStarted = rej)));
  worker.on('message', (m: { type: string; id?: number; metrics?: unknown; consumers?: unknown }) => {
    if (m.type === 'started') resolveStarted();
    else if (m.type === 'metrics' && m.id !== undefined) pending.get(m.id)?.(m.metrics);
    else if (m.type === 'consumers' && m.id !== undefined) pending.get(m.id)?.(m.consumers);
  });
  worker.on('error', (err) => {
    rejectStarted(err);
    if (!stopping) onDied(err);
  });
  worker.on('exit', (code) => {
    rejectStarted(new Error(`the consumer thread exited with code ${code}`));
    if (!stopping && code !== 0) onDied(new Error(`the consumer thread exited with code ${code}`));
  });
  /** Asks the worker; an unanswered question (a busy or stuck thread) answers `fallback` after 2 s. */
  const ask = <T>(type: 'metrics' | 'consumers', fallback: T) =>
    new Promise<T>((resolve) => {
      const id = nextId++;
      const t = setTimeout(() => (pending.delete(id), resolve(fallback)), 2_000);
      pending.set(id, (answer) => (clearTimeout(t), pending.delete(id), resolve(answer as T)));
      worker.postMessage({ type, id });
    });
  addMetricsSource(() => ask('metrics', []));
  // The worker's consumers count in this thread's /healthz: a dead one there fails liveness here.
  addConsumerStateSource(() => ask<ConsumerState[]>('consumers', []));
  return {
    started,
    service: {
      name: 'consumers (worker thread)',
      async stop() {
        stopping = true;
        worker.postMessage({ type: 'stop' });
        const t = setTimeout(() => {
          logger.warn('the consumer thread did not stop in time; ending it');
          void worker.terminate();
        }, env.SHUTDOWN_TIMEOUT_MS);
        await exited;
        clearTimeout(t);
      },
    },
  };
}

/**
 * Built (dist/*.js): the worker's own module. From the sources (`pnpm start` through tsx): a worker does not
 * inherit tsx's loader, so a one-line bootstrap registers it, then imports the TypeScript module.
 */
function spawn(data: ConsumerWorkerData): Worker {
  const js = new URL('./consumerWorker.js', import.meta.url);
  if (existsSync(fileURLToPath(js))) return new Worker(js, { workerData: data });
  const ts = new URL('./consumerWorker.ts', import.meta.url).href;
  const tsx = import.meta.resolve('tsx/esm/api');
  const boot = `import(${JSON.stringify(tsx)}).then(({ register }) => { register(); return import(${JSON.stringify(ts)}); });`;
  return new Worker(boot, { eval: true, workerData: data });
}
