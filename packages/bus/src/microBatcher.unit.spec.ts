import { describe, expect, it } from 'vitest';
import { createKeyedMicroBatcher } from './microBatcher.js';

interface Item {
  shop: string;
  n: number;
}

/** A flush the test ends when it likes, recording what each flush held and how many ran at once. */
function heldFlushes() {
  const flushes: { items: Item[]; done: () => void }[] = [];
  let running = 0;
  let mostAtOnce = 0;
  const flush = (items: Item[]) =>
    new Promise<void>((resolve) => {
      running++;
      mostAtOnce = Math.max(mostAtOnce, running);
      flushes.push({
        items,
        done: () => {
          running--;
          resolve();
        },
      });
    });
  return { flushes, flush, mostAtOnce: () => mostAtOnce };
}

const settled = () => new Promise((r) => setImmediate(r));

describe('createKeyedMicroBatcher', () => {
  it("flushes another key while one key's flush is in progress, and never two of one key at once", async () => {
    const f = heldFlushes();
    const batcher = createKeyedMicroBatcher<Item>({ key: (i) => i.shop, lingerMs: 0, maxWeight: 100, flush: f.flush });
    const bulk = batcher.add({ shop: 'abuser', n: 1 });
    await settled();
    expect(f.flushes.map((x) => x.items)).toEqual([[{ shop: 'abuser', n: 1 }]]);

    // The abuser's flush is held: another shop's item is flushed at once beside it; the abuser's next one waits.
    let otherDone = false;
    const other = batcher.add({ shop: 'other', n: 2 }).then(() => (otherDone = true));
    const abuserNext = batcher.add({ shop: 'abuser', n: 3 });
    await settled();
    expect(f.flushes.map((x) => x.items)).toEqual([[{ shop: 'abuser', n: 1 }], [{ shop: 'other', n: 2 }]]);
    f.flushes[1].done();
    await other;
    expect(otherDone).toBe(true);

    f.flushes[0].done();
    await bulk;
    await settled();
    expect(f.flushes.map((x) => x.items)).toEqual([[{ shop: 'abuser', n: 1 }], [{ shop: 'other', n: 2 }], [{ shop: 'abuser', n: 3 }]]);
    f.flushes[2].done();
    await abuserNext;
    await batcher.close();
    expect(f.mostAtOnce()).toBe(2);
  });

  it('still gathers one key’s concurrent items into one flush, and close waits for what is pending', async () => {
    const f = heldFlushes();
    const batcher = createKeyedMicroBatcher<Item>({ key: (i) => i.shop, lingerMs: 0, maxWeight: 100, flush: f.flush });
    const first = batcher.add({ shop: 's', n: 1 });
    await settled();
    const rest = [batcher.add({ shop: 's', n: 2 }), batcher.add({ shop: 's', n: 3 })];
    await settled();
    expect(f.flushes).toHaveLength(1);
    f.flushes[0].done();
    await first;
    await settled();
    expect(f.flushes[1].items.map((i) => i.n)).toEqual([2, 3]);
    const closed = batcher.close();
    f.flushes[1].done();
    await Promise.all([...rest, closed]);
    expect(f.flushes).toHaveLength(2);
  });
});
