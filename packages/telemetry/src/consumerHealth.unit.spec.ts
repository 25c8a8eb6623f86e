import { afterEach, describe, expect, it } from 'vitest';
import { addConsumerStateSource, deadConsumers, registry, setConsumerDeadAfter, trackConsumer } from './index.js';

const upValue = async (group: string) => (await registry.getSingleMetric('shopstream_consumer_up')?.get())?.values.find((v) => v.labels.group === group)?.value;

describe('consumer liveness', () => {
  afterEach(() => setConsumerDeadAfter(60_000));

  it('reports a consumer dead only once it has been down CONSUMER_DEAD_AFTER_MS, on a clock the test drives', async () => {
    let now = 1_000_000;
    setConsumerDeadAfter(5_000);
    const a = trackConsumer('g-a', () => now);
    const b = trackConsumer('g-a', () => now);
    a.up();
    b.up();
    expect(await upValue('g-a')).toBe(1);
    now += 1_000;
    b.down();
    expect(await upValue('g-a')).toBe(0);
    now += 4_999;
    expect(await deadConsumers(now)).toEqual([]);
    now += 1;
    expect(await deadConsumers(now)).toEqual([{ group: 'g-a', down_since: new Date(1_001_000).toISOString() }]);
    b.up();
    expect(await deadConsumers(now)).toEqual([]);
    expect(await upValue('g-a')).toBe(1);
    a.remove();
    b.remove();
    expect(await upValue('g-a')).toBeUndefined();
  });

  it("counts another thread's consumers (the all-in-one's consumer thread) with this thread's", async () => {
    setConsumerDeadAfter(1_000);
    addConsumerStateSource(async () => [{ group: 'in-thread', up: false, since: 0 }]);
    expect(await deadConsumers(5_000)).toEqual([{ group: 'in-thread', down_since: new Date(0).toISOString() }]);
  });
});
