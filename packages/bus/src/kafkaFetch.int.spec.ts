import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '@shopstream/telemetry';
import { testInfra, uniquePrefix, waitFor } from '@shopstream/testkit';
import { createKafkaBus } from './kafka.js';
import { createPlatformaticKafkaBus } from './kafkaPlatformatic.js';
import type { Bus, Subscription } from './port.js';

const logger = createLogger('bus-fetch', process.env.TEST_LOG_LEVEL ?? 'silent');

const adapters = [
  { name: 'kafkajs', create: createKafkaBus },
  { name: '@platformatic/kafka', create: createPlatformaticKafkaBus },
];

describe.each(adapters)('Kafka adapter ($name): the consumers fetch options', ({ create }) => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  });

  it('gathers records published one by one into one batch while the fetch waits for fetchMinBytes (up to fetchMaxWaitMs)', async () => {
    const { kafkaBrokers } = testInfra();
    const bus: Bus = await create({
      brokers: kafkaBrokers,
      clientId: 'fetch',
      replicationFactor: 1,
      logger,
      // More than two of the records below and less than three (each about 1,080 bytes in its record batch): the
      // fetch waiting when the first lands is answered when the third does. With a minimum of 1 byte (the setting's
      // old value) it answers with the first alone. The wait is long so that it does not run out between the
      // publishes on a busy machine, and the session longer (kafkajs's heartbeats wait behind the fetch).
      fetchMinBytes: 2_800,
      fetchMaxWaitMs: 10_000,
      sessionTimeoutMs: 90_000,
    });
    cleanups.push(() => bus.close());
    const prefix = uniquePrefix();
    const topic = `${prefix}fetch`;
    await bus.ensureTopics([{ topic, partitions: 1 }]);
    const batches: string[][] = [];
    const sub: Subscription = await bus.consume({
      groupId: `${prefix}fetch-group`,
      topics: [topic],
      fromBeginning: true,
      handleBatch: async (batch) => {
        batches.push(batch.records.map((r) => r.value.toString()));
      },
    });
    cleanups.push(() => sub.stop());

    // Consumed (larger than the minimum by itself, so answered at once), so the consumer is past its join and its
    // next fetch is waiting on the broker.
    await bus.publish(topic, [{ key: 'k', value: 'first'.padEnd(3_000, '.') }]);
    await waitFor(() => batches.flat().some((v) => v.startsWith('first')), { timeoutMs: 60_000, message: 'the first record consumed' });
    const before = batches.length;
    const values = ['a', 'b', 'c'].map((c) => c.repeat(1_000));
    for (const value of values) await bus.publish(topic, [{ key: 'k', value }]);
    await waitFor(() => batches.flat().includes(values[2]), { timeoutMs: 60_000, message: 'the three records consumed' });
    expect(batches.slice(before).map((b) => b.map((v) => v[0]))).toEqual([['a', 'b', 'c']]);
  });
});
