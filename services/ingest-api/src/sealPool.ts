import type { Worker } from 'node:worker_threads';
import type { Sealed, UnsealedRecord, UnwrapTask } from '@shopstream/privacy';
import { counter, type Logger } from '@shopstream/telemetry';
import { spawnModuleWorker } from './bodyPool.js';

/** What the seal worker is asked (sealWorker.ts): a batch of values to seal, or of data keys to unwrap. */
export type SealWorkerTask =
  | { id: number; kind: 'seal'; keys: Uint8Array; aads: string[]; plaintexts: (string | Uint8Array)[] }
  | { id: number; kind: 'unwrap'; task: UnwrapTask };

/** What it answers: per value its nonce and ciphertext (base64), or the data keys one after the other; or why not. */
export type SealWorkerAnswer =
  | { id: number; kind: 'seal'; ivs: string[]; datas: string[] }
  | { id: number; kind: 'unwrap'; keys: Uint8Array }
  | { id: number; kind: 'failed'; message: string };

/** The seal worker thread (sealWorker.ts). */
export const spawnSealWorker = (): Worker => spawnModuleWorker('sealWorker');

/** Sealed records in a batch below which they are sealed on the event loop (a single event: the round trip costs more). */
export const SEAL_ELSEWHERE_MIN = 8;

const KEY_BYTES = 32;

const fellBack = counter(
  'shopstream_ingest_seal_worker_fallbacks_total',
  "Batches the ingest seal worker did not do (it ended, or failed the task) and the event loop did instead: nothing is lost, the event loop's time is.",
  ['kind'],
);

interface Waiting {
  resolve: (a: SealWorkerAnswer) => void;
  reject: (e: Error) => void;
}

/**
 * A worker thread that does the AES-GCM work of bulk requests off the event loop (INGEST_SEAL_WORKER): sealing
 * their records' personal fields and unwrapping the data keys their contacts' look-ups read (docs/privacy.md#cost).
 * That work is a fixed cost per record with a contact (about 8 µs of node:crypto's calls to seal one, as much to
 * unwrap a key), which on the event loop took a tenth of bulk ingest's rate. Values go in and base64 strings
 * come out, so a batch's round trip costs a small part of what it moves. Started on first use; a task the worker
 * does not answer (it ended, or threw) is done on the event loop instead, and the next task starts a new worker.
 */
export class SealPool {
  private worker: Worker | undefined;
  private readonly waiting = new Map<number, Waiting>();
  private nextId = 1;
  private closed = false;

  constructor(
    private readonly logger: Logger,
    private readonly spawn: () => Worker = spawnSealWorker,
  ) {}

  /**
   * The records' sealed parts, in order, made by the worker; undefined when they are to be sealed on the event loop
   * instead: fewer than SEAL_ELSEWHERE_MIN, or the worker failed them.
   */
  async seal(records: readonly UnsealedRecord[]): Promise<Sealed[] | undefined> {
    if (records.length < SEAL_ELSEWHERE_MIN || this.closed) return undefined;
    const keys = new Uint8Array(KEY_BYTES * records.length);
    records.forEach((r, i) => keys.set(r.dataKey.key, i * KEY_BYTES));
    try {
      const a = await this.ask({ id: 0, kind: 'seal', keys, aads: records.map((r) => r.aad), plaintexts: records.map((r) => r.personal) }, [keys.buffer]);
      if (a.kind === 'seal' && a.ivs.length === records.length) return a.ivs.map((iv, i) => ({ iv, data: a.datas[i] }));
    } catch {
      // Logged where the worker ended (start); sealed here instead.
    }
    fellBack.inc({ kind: 'seal' });
    return undefined;
  }

  /** Runs an UnwrapTask in the worker (ContactKeys' unwrapElsewhere): the data keys in order; rejects when it fails. */
  async unwrap(task: UnwrapTask): Promise<Buffer[]> {
    if (this.closed) throw new Error('the seal pool is closed');
    let a: SealWorkerAnswer;
    try {
      a = await this.ask({ id: 0, kind: 'unwrap', task });
    } catch (e) {
      fellBack.inc({ kind: 'unwrap' });
      throw e;
    }
    if (a.kind !== 'unwrap') {
      fellBack.inc({ kind: 'unwrap' });
      throw new Error(a.kind === 'failed' ? a.message : 'unexpected answer');
    }
    const all = Buffer.from(a.keys.buffer, a.keys.byteOffset, a.keys.byteLength);
    return task.items.map((_, i) => all.subarray(i * KEY_BYTES, (i + 1) * KEY_BYTES));
  }

  async close(): Promise<void> {
    this.closed = true;
    const w = this.worker;
    this.worker = undefined;
    this.failAll(new Error('the seal pool is closed'));
    await w?.terminate();
  }

  private ask(task: SealWorkerTask, transfer: ArrayBuffer[] = []): Promise<SealWorkerAnswer> {
    const worker = this.worker ?? this.start();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      // A worker with tasks keeps the process alive until it answers; an idle one does not.
      worker.ref();
      worker.postMessage({ ...task, id }, transfer);
    });
  }

  private start(): Worker {
    const worker = this.spawn();
    this.worker = worker;
    worker.on('message', (a: SealWorkerAnswer) => {
      const w = this.waiting.get(a.id);
      this.waiting.delete(a.id);
      if (this.waiting.size === 0) worker.unref();
      w?.resolve(a);
    });
    let ended = false;
    const end = (cause: string, err?: Error) => {
      if (ended) return;
      ended = true;
      if (this.worker === worker) this.worker = undefined;
      if (this.closed) return;
      this.logger.error({ err, cause }, `the ingest seal worker ended (${cause}); its batches are sealed on the event loop and another worker is started`);
      this.failAll(new Error(`the seal worker ended: ${cause}`));
    };
    worker.on('error', (err) => end((err as { code?: string }).code ?? err.message, err));
    worker.on('exit', (code) => end(`exit code ${code}`));
    worker.unref();
    return worker;
  }

  private failAll(e: Error): void {
    for (const w of this.waiting.values()) w.reject(e);
    this.waiting.clear();
  }
}
