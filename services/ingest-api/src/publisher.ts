import type { Worker } from 'node:worker_threads';
import { BusUnavailableError, PublishAbandonedError, type OutgoingRecord, type PublishOptions } from '@shopstream/bus';
import type { KafkaSecurity } from '@shopstream/bus';
import { counter, type Logger } from '@shopstream/telemetry';
import { spawnModuleWorker } from './bodyPool.js';

/** What the producer thread opens its Kafka client with: the process's own settings (runtime.ts), cloneable. */
export interface PublisherConfig {
  client: 'kafkajs' | 'platformatic';
  brokers: string[];
  security?: KafkaSecurity;
  clientId: string;
  replicationFactor: number;
  lingerMs: number;
  publishTimeoutMs: number;
  stallMs: number;
  logLevel: string;
  /** The thread's nice value (INGEST_WORKER_NICE; see @shopstream/runtime's threadPriority.ts). */
  nice: number;
}

/** To the producer thread: records to publish (their values moved when they own their memory), or close. */
export type PublisherMessage =
  { type: 'publish'; id: number; topic: string; records: { key: string; value: string | Uint8Array; headers?: Record<string, string> }[] } | { type: 'close' };

/** From the producer thread: acknowledged by the broker, or not (unavailable: the bus's BusUnavailableError). */
export type PublishAnswer = { id: number; ok: true } | { id: number; ok: false; unavailable: boolean; message: string };

const restarts = counter(
  'shopstream_ingest_producer_thread_restarts_total',
  "Ends of ingest's large-body producer thread (a crash); the publishes it held were answered 503 and the next one starts another.",
);

interface Pending {
  resolve: () => void;
  reject: (e: Error) => void;
}

/**
 * Publishes large bodies' records from a thread of its own with a producer of its own (publisherWorker.ts):
 * kafkajs held the event loop 30-65 ms (quiet machine) to 300-690 ms (busy) encoding one 5.5 MB send, and every
 * small request's publish waited behind it on the process's producer (one send in flight). The producer is the
 * process's adapter with the same settings (idempotent, the keys' partitioner), so a request's records are one
 * send as before, in order, and its answer still comes after the broker's acknowledgement; a failure the bus
 * calls unavailable is a BusUnavailableError here too (the request's 503). A thread that ends with publishes in
 * flight fails them with BusUnavailableError (they may still land, as after a timed-out send), and the next
 * publish starts another.
 */
export class WorkerPublisher {
  private worker: Worker | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private closed = false;

  constructor(
    private readonly config: PublisherConfig,
    private readonly logger: Logger,
    private readonly spawn: (config: PublisherConfig) => Worker = (c) => spawnModuleWorker('publisherWorker', c),
  ) {}

  publish(topic: string, records: OutgoingRecord[], opts?: PublishOptions): Promise<void> {
    if (this.closed) return Promise.reject(new BusUnavailableError('the large-body producer is closed'));
    // Asked here, not in the thread (a function does not cross): the records are about to leave for it.
    if (opts?.abandoned?.() === true) return Promise.reject(new PublishAbandonedError());
    const worker = this.worker ?? this.start();
    const id = this.nextId++;
    // A value that owns its whole memory is moved, not copied (no one reads it after its publish); a small one
    // may share Node's buffer pool, and moving that would take the pool from everyone else: copied.
    const moved = new Set<ArrayBuffer>();
    const out = records.map((r) => {
      if (typeof r.value !== 'string' && r.value.byteOffset === 0 && r.value.byteLength === r.value.buffer.byteLength) {
        moved.add(r.value.buffer as ArrayBuffer);
      }
      return { key: r.key, value: r.value, ...(r.headers ? { headers: r.headers } : {}) };
    });
    return new Promise<void>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.ref();
      worker.postMessage({ type: 'publish', id, topic, records: out } satisfies PublisherMessage, [...moved]);
    });
  }

  /** Closes the thread's producer (its sends in flight finish first) and ends the thread. */
  async close(): Promise<void> {
    this.closed = true;
    const worker = this.worker;
    if (!worker) return;
    const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
    worker.postMessage({ type: 'close' } satisfies PublisherMessage);
    const timer = setTimeout(() => void worker.terminate(), 10_000);
    await exited;
    clearTimeout(timer);
  }

  private start(): Worker {
    const worker = this.spawn(this.config);
    this.worker = worker;
    worker.on('message', (a: PublishAnswer) => {
      const p = this.pending.get(a.id);
      this.pending.delete(a.id);
      if (this.pending.size === 0) worker.unref();
      if (!p) return;
      if (a.ok) p.resolve();
      else p.reject(a.unavailable ? new BusUnavailableError(a.message) : new Error(a.message));
    });
    let ended = false;
    const end = (cause: string, err?: Error) => {
      if (ended) return;
      ended = true;
      if (this.worker === worker) this.worker = undefined;
      const failed = [...this.pending.values()];
      this.pending.clear();
      if (!this.closed || failed.length > 0) {
        restarts.inc();
        this.logger.error({ err, cause, publishes: failed.length }, `the large-body producer thread ended (${cause}); its publishes are answered 503`);
      }
      for (const p of failed) p.reject(new BusUnavailableError(`the large-body producer thread ended: ${cause}`));
    };
    worker.on('error', (err) => end((err as { code?: string }).code ?? err.message, err));
    worker.on('exit', (code) => end(`exit code ${code}`));
    worker.unref();
    return worker;
  }
}
