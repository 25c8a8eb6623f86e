/**
 * A worker thread of ingest's body pool (bodyPool.ts): prepares large bodies off the event loop that answers
 * HTTP. Each message is a BodyTask, its bytes transferred; the answer is a PreparedBody, its record bytes
 * transferred back. Anything thrown ends the thread: the pool answers that request 503 and starts another.
 */
import { parentPort } from 'node:worker_threads';
import { prepareBody, type BodyTask } from './prepareBody.js';

parentPort!.on('message', (task: BodyTask) => {
  const prepared = prepareBody(task);
  parentPort!.postMessage(prepared, prepared.kind === 'items' ? [prepared.heads] : []);
});
