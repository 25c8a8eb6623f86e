import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '@shopstream/telemetry';
import { testInfra, uniquePrefix, waitFor } from '@shopstream/testkit';
import { createPlatformaticKafkaBus } from './kafkaPlatformatic.js';
import type { Bus } from './port.js';
import { partitionFor } from './pglog/partitionFor.js';

const logger = createLogger('bus-commits', process.env.TEST_LOG_LEVEL ?? 'silent');

describe('Kafka adapter (@platformatic/kafka): commitIntervalMs', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  });

  /**
   * A consumer of two partitions that handles one record on each, then two more, and stops. Returns the group's lag
   * per partition after the first two were handled (and their commit seen), after the next two were handled, and
   * after the stop.
   */
  const run = async (commitIntervalMs: number) => {
    const { kafkaBrokers } = testInfra();
    const bus: Bus = await createPlatformaticKafkaBus({ brokers: kafkaBrokers, clientId: 'commits', replicationFactor: 1, logger, commitIntervalMs });
    cleanups.push(() => bus.close());
    const prefix = uniquePrefix();
    const topic = `${prefix}commits`;
    const groupId = `${prefix}commits-group`;
    await bus.ensureTopics([{ topic, partitions: 2 }]);
    const handled: string[] = [];
    const lag = async () => (await bus.lag(groupId, [topic])).map((l) => l.lag);
    const sub = await bus.consume({
      groupId,
      topics: [topic],
      fromBeginning: true,
      handleBatch: async (batch) => {
        handled.push(...batch.records.map((r) => r.value.toString()));
      },
    });
    cleanups.push(() => sub.stop());
    /** A key of each partition (the adapter's partitioner: murmur2), so each publish lands one record on each. */
    const keyOf = (partition: number) => `k${[...Array(64).keys()].find((i) => partitionFor(`k${i}`, 2) === partition)}`;
    const publishBoth = (v: string) => Promise.all([0, 1].map((partition) => bus.publish(topic, [{ key: keyOf(partition), value: `${v}-${partition}` }])));

    await publishBoth('first');
    // A quiet consumer's first commit goes at once (the second partition's may wait one interval behind it).
    await waitFor(async () => handled.length === 2 && (await lag()).some((l) => l === 0), { timeoutMs: 60_000, message: 'the first records committed' });
    const afterFirst = await lag();
    await publishBoth('second');
    await waitFor(() => handled.length === 4, { timeoutMs: 60_000, message: 'the second records handled' });
    // Handled batches are committed right after their handler resolves when they are committed one by one.
    if (commitIntervalMs === 0) await waitFor(async () => (await lag()).every((l) => l === 0), { timeoutMs: 60_000, message: 'every batch committed' });
    const afterSecond = await lag();
    await sub.stop();
    return { afterFirst, afterSecond, afterStop: await lag(), handled: handled.sort() };
  };

  it('commits the batches handled within an interval together, later, and everything handled at a stop', async () => {
    // Longer than the test: what was handled after the first commit waits for the stop.
    const r = await run(600_000);
    expect(r.handled).toEqual(['first-0', 'first-1', 'second-0', 'second-1']);
    expect(r.afterFirst.filter((l) => l === 0).length).toBeGreaterThanOrEqual(1);
    // The second records were handled and are not committed: each partition's position is behind them.
    expect(r.afterSecond.every((l) => l >= 1)).toBe(true);
    expect(r.afterStop).toEqual([0, 0]);
  });

  it('commits each batch as it is handled with 0', async () => {
    const r = await run(0);
    expect(r.handled).toEqual(['first-0', 'first-1', 'second-0', 'second-1']);
    expect(r.afterSecond).toEqual([0, 0]);
    expect(r.afterStop).toEqual([0, 0]);
  });
});
