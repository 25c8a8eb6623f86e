/**
 * A worker thread of ingest's body pool (bodyPool.ts): prepares large bodies off the event loop that answers
 * HTTP. Each message is a BodyTask, its bytes transferred; the answer is a PreparedBody, its record bytes
 * transferred back. It runs at a lower priority (INGEST_WORKER_NICE), so the event loop comes first on a busy machine. Anything thrown ends the thread: the pool answers that request 503 and starts another.
 */
import type { BodyWorkerData } from './bodyPool.js';
import { parentPort, workerData } from 'node:worker_threads';
import { prepareBody, type BodyTask } from './prepareBody.js';
import { niceThisThread } from '@shopstream/runtime/thread-priority';

niceThisThread((workerData as BodyWorkerData | undefined)?.nice ?? 0);

parentPort!.on('message', (task: BodyTask) => {
  const prepared = prepareBody(task);
  parentPort!.postMessage(prepared, prepared.kind === 'items' ? [prepared.heads] : []);
});
