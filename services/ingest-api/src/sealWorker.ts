/**
 * The worker thread of ingest's seal pool (sealPool.ts): seals bulk requests' personal fields and unwraps their
 * contacts' data keys off the event loop. Pure work on what each message carries (keys included): it keeps
 * nothing between messages. A task that throws is answered `failed`, and the pool does it on the event loop.
 */
import { parentPort } from 'node:worker_threads';
// Only the AEAD module: the worker loads no database or Kafka client.
import { runUnwrapTask, seal } from '@shopstream/privacy/aead';
import type { SealWorkerAnswer, SealWorkerTask } from './sealPool.js';

const KEY_BYTES = 32;

function answer(t: SealWorkerTask): { a: SealWorkerAnswer; transfer: ArrayBuffer[] } {
  if (t.kind === 'seal') {
    const keys = Buffer.from(t.keys.buffer, t.keys.byteOffset, t.keys.byteLength);
    const ivs: string[] = [];
    const datas: string[] = [];
    t.plaintexts.forEach((p, i) => {
      const s = seal(keys.subarray(i * KEY_BYTES, (i + 1) * KEY_BYTES), typeof p === 'string' ? p : Buffer.from(p.buffer, p.byteOffset, p.byteLength), t.aads[i]);
      ivs.push(s.iv);
      datas.push(s.data);
    });
    // The keys were only ever needed for this batch.
    keys.fill(0);
    return { a: { id: t.id, kind: 'seal', ivs, datas }, transfer: [] };
  }
  const keys = runUnwrapTask(t.task);
  const out = new Uint8Array(KEY_BYTES * keys.length);
  keys.forEach((k, i) => out.set(k, i * KEY_BYTES));
  return { a: { id: t.id, kind: 'unwrap', keys: out }, transfer: [out.buffer] };
}

parentPort!.on('message', (t: SealWorkerTask) => {
  let reply: { a: SealWorkerAnswer; transfer: ArrayBuffer[] };
  try {
    reply = answer(t);
  } catch (e) {
    reply = { a: { id: t.id, kind: 'failed', message: e instanceof Error ? e.message : String(e) }, transfer: [] };
  }
  parentPort!.postMessage(reply.a, reply.transfer);
});
