import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { counter } from '@shopstream/telemetry';
import type { Logger } from '@shopstream/telemetry';
import type { BodyTask, PreparedBody } from './prepareBody.js';

/** A worker of the pool ended while it held a request's body: that request is answered 503. */
export class BodyWorkerCrashed extends Error {}

export interface BodyPoolOptions {
  /** Worker threads (INGEST_BODY_WORKERS). */
  size: number;
  logger: Logger;
  /** Starts a worker (tests: one that crashes). Default: spawnBodyWorker. */
  spawn?: () => Worker;
}

const restarts = counter(
  'shopstream_ingest_body_worker_restarts_total',
  'Worker threads of the ingest body pool that ended unasked (a crash) and were started again; the request each held was answered 503.',
);

const prepared = counter(
  'shopstream_ingest_body_worker_bodies_total',
  'Large ingest bodies prepared (parsed, validated, serialised) by a worker thread of the body pool.',
);

interface Job {
  task: BodyTask;
  resolve: (p: PreparedBody) => void;
  reject: (e: Error) => void;
}

interface Slot {
  worker: Worker;
  job: Job | undefined;
}

/**
 * A few worker threads that prepare large ingest bodies (prepareBody.ts): JSON.parse, validation and the
 * records' serialisation of a 6 MB bulk held the event loop for hundreds of ms, so small requests waited behind
 * them. The body's bytes are transferred in, and only small values and one buffer of record bytes come back
 * (structured-cloning the parsed events back cost more than parsing them). Workers start on first use; one
 * that ends unasked fails its request with BodyWorkerCrashed, is logged and counted, and another takes its place.
 */
export class BodyPool {
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private closed = false;

  constructor(private readonly opts: BodyPoolOptions) {}

  run(task: BodyTask): Promise<PreparedBody> {
    if (this.closed) return Promise.reject(new BodyWorkerCrashed('the body pool is closed'));
    return new Promise((resolve, reject) => {
      this.queue.push({ task, resolve, reject });
      this.dispatch();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const job of this.queue.splice(0)) job.reject(new BodyWorkerCrashed('the body pool is closed'));
    await Promise.all(this.slots.splice(0).map((s) => s.worker.terminate()));
  }

  private dispatch(): void {
    while (this.queue.length > 0) {
      let slot = this.slots.find((s) => s.job === undefined);
      if (!slot) {
        if (this.slots.length >= this.opts.size) return;
        slot = this.start();
      }
      const job = this.queue.shift()!;
      slot.job = job;
      slot.worker.ref();
      // The body's bytes are moved, not copied: the request holds no other reference to them.
      slot.worker.postMessage(job.task, [job.task.bytes.buffer as ArrayBuffer]);
    }
  }

  private start(): Slot {
    const worker = (this.opts.spawn ?? spawnBodyWorker)();
    const slot: Slot = { worker, job: undefined };
    this.slots.push(slot);
    worker.on('message', (body: PreparedBody) => {
      const job = slot.job;
      slot.job = undefined;
      slot.worker.unref();
      prepared.inc();
      job?.resolve(body);
      this.dispatch();
    });
    let ended = false;
    const end = (cause: string, err?: Error) => {
      if (ended) return;
      ended = true;
      const i = this.slots.indexOf(slot);
      if (i >= 0) this.slots.splice(i, 1);
      if (this.closed) return;
      restarts.inc();
      this.opts.logger.error({ err, cause }, `an ingest body worker ended (${cause}); its request is answered 503 and another worker is started`);
      const job = slot.job;
      slot.job = undefined;
      job?.reject(new BodyWorkerCrashed(`the body worker ended: ${cause}`));
      this.dispatch();
    };
    worker.on('error', (err) => end((err as { code?: string }).code ?? err.message, err));
    worker.on('exit', (code) => end(`exit code ${code}`));
    // An idle worker does not keep the process alive; one holding a body does (see dispatch).
    worker.unref();
    return slot;
  }
}

/** What a body worker is started with: its thread's nice value (INGEST_WORKER_NICE; see @shopstream/runtime's threadPriority.ts). */
export interface BodyWorkerData {
  nice: number;
}

/** A worker thread of the pool (bodyWorker.ts). */
export function spawnBodyWorker(data?: BodyWorkerData): Worker {
  return spawnModuleWorker('bodyWorker', data);
}

/**
 * A worker thread running this directory's module `name` (bodyWorker, publisherWorker), given `workerData`.
 * Built (dist/*.js): the worker's own module. From the sources (tsx, vitest): a worker does not inherit tsx's
 * loader, so a one-line bootstrap registers it, then imports the TypeScript module, with workspace packages
 * resolved to their sources as the process does (as services/all-in-one/src/consumerThread.ts). No heap limit of
 * its own (resourceLimits): a worker that reached one could take the whole process down as it ended (Node 20's
 * "Reached heap limit" in the worker's teardown), and a 10 MiB body's parse needs well under the default heap.
 */
export function spawnModuleWorker(name: string, workerData?: unknown): Worker {
  const js = new URL(`./${name}.js`, import.meta.url);
  if (existsSync(fileURLToPath(js))) return new Worker(js, { workerData });
  const ts = new URL(`./${name}.ts`, import.meta.url).href;
  const tsx = import.meta.resolve('tsx/esm/api');
  const boot = `import(${JSON.stringify(tsx)}).then(({ register }) => { register(); return import(${JSON.stringify(ts)}); });`;
  const source = '--conditions=@shopstream/source';
  const execArgv = process.execArgv.includes(source) ? process.execArgv : [...process.execArgv, source];
  return new Worker(boot, { eval: true, execArgv, workerData });
}
