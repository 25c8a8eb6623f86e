import { randomUUID } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BusUnavailableError, type BusRecord } from '@shopstream/bus';
import { readTopic, startTestRuntime } from '@shopstream/harness';
import type { Runtime } from '@shopstream/runtime';
import { spawnModuleWorker } from './bodyPool.js';
import { WorkerPublisher, type PublisherConfig } from './publisher.js';

let rt: Runtime;
let config: PublisherConfig;

beforeAll(async () => {
  rt = await startTestRuntime({}, 'ingest-publisher');
  config = {
    client: rt.env.KAFKA_CLIENT,
    brokers: rt.env.KAFKA_BROKERS!,
    clientId: 'ingest-publisher-spec',
    replicationFactor: 1,
    lingerMs: rt.env.INGEST_LINGER_MS,
    publishTimeoutMs: 5_000,
    stallMs: rt.env.INGEST_PUBLISH_STALL_MS,
    logLevel: 'silent',
    nice: 0,
  };
});
afterAll(async () => {
  await rt?.close();
});

/** The records of `key` on `events`, in offset order (one key: one partition). */
async function recordsOf(key: string, count: number): Promise<BusRecord[]> {
  const mine = (rs: BusRecord[]) => rs.filter((r) => r.key === key).sort((a, b) => (BigInt(a.offset) < BigInt(b.offset) ? -1 : 1));
  return mine(await readTopic(rt, rt.topics.events, (rs) => mine(rs).length >= count));
}

describe('the large-body producer thread', () => {
  it('publishes the records in order with their keys, values (moved or copied) and headers, answered after the broker acknowledged them', async () => {
    const publisher = new WorkerPublisher(config, rt.logger);
    try {
      const key = randomUUID();
      const big = Buffer.alloc(200_000, 'b');
      const small = Buffer.from('{"small":1}');
      await publisher.publish(rt.topics.events, [
        { key, value: big, headers: { h: '1' } },
        { key, value: small },
        { key, value: '{"text":3}', headers: { h: '3' } },
      ]);
      // The small buffer shares Node's pool: it was copied, and is still readable here.
      expect(small.toString()).toBe('{"small":1}');
      const records = await recordsOf(key, 3);
      expect(records.map((r) => [r.value.length, r.headers.h])).toEqual([
        [200_000, '1'],
        [11, undefined],
        [10, '3'],
      ]);
      expect(records[1].value.toString()).toBe('{"small":1}');
    } finally {
      await publisher.close();
    }
  });

  it('a thread that ends holding a publish fails it with BusUnavailableError (a 503); the next publish starts another thread', async () => {
    let spawned = 0;
    const spawn = (c: PublisherConfig) =>
      spawned++ === 0
        ? new Worker("require('node:worker_threads').parentPort.once('message', () => process.exit(3));", { eval: true })
        : spawnModuleWorker('publisherWorker', c);
    const publisher = new WorkerPublisher(config, rt.logger, spawn);
    try {
      const key = randomUUID();
      await expect(publisher.publish(rt.topics.events, [{ key, value: 'lost' }])).rejects.toBeInstanceOf(BusUnavailableError);
      await publisher.publish(rt.topics.events, [{ key, value: 'kept' }]);
      expect(spawned).toBe(2);
      const records = await recordsOf(key, 1);
      expect(records.map((r) => r.value.toString())).toContain('kept');
    } finally {
      await publisher.close();
    }
  });

  it('a broker that cannot be reached: BusUnavailableError, as from the process bus', async () => {
    const publisher = new WorkerPublisher({ ...config, brokers: ['127.0.0.1:1'], publishTimeoutMs: 1_000 }, rt.logger);
    try {
      await expect(publisher.publish(rt.topics.events, [{ key: randomUUID(), value: 'x' }])).rejects.toBeInstanceOf(BusUnavailableError);
    } finally {
      await publisher.close();
    }
  });
});
