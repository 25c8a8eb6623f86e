import { describe, expect, it } from 'vitest';
import { gather } from './gather.js';

/** A gatherer whose groups the test settles itself: each run is recorded with a function that ends it. */
function recorded(maxInFlight: number, maxWeight: number) {
  const runs: { items: number[]; end: (fail?: Error) => void }[] = [];
  const g = gather<number, string>({
    maxInFlight,
    maxWeight,
    weight: (n) => n,
    run: (items, done) =>
      new Promise<void>((resolve, reject) => {
        runs.push({
          items,
          end: (fail) => {
            if (fail) return reject(fail);
            items.forEach((n, i) => done(i, Promise.resolve(`done ${n}`)));
            resolve();
          },
        });
      }),
  });
  return { g, runs };
}
/** Until the gatherer's next turn (setImmediate) has run. */
const turn = () => new Promise<void>((r) => setImmediate(r));
/** Turns of the event loop until `done` holds (a group ending schedules the next one a few promise steps later). */
async function turnsUntil(done: () => boolean): Promise<void> {
  for (let i = 0; i < 20 && !done(); i++) await turn();
}

describe('gather (work handed over in one turn, run as groups)', () => {
  it('runs what is submitted in one turn as one group, and each item gets its own result', async () => {
    const { g, runs } = recorded(3, 100);
    const results = [g.submit(1), g.submit(2), g.submit(3)];
    await turn();
    expect(runs.map((r) => r.items)).toEqual([[1, 2, 3]]);
    runs[0].end();
    expect(await Promise.all(results)).toEqual(['done 1', 'done 2', 'done 3']);
  });

  it('starts a new group past the weight, always taking at least one item', async () => {
    const { g, runs } = recorded(3, 10);
    const results = [g.submit(6), g.submit(4), g.submit(25), g.submit(1)];
    await turn();
    expect(runs.map((r) => r.items)).toEqual([[6, 4], [25], [1]]);
    runs.forEach((r) => r.end());
    expect(await Promise.all(results)).toEqual(['done 6', 'done 4', 'done 25', 'done 1']);
  });

  it('runs at most maxInFlight groups; what arrives meanwhile waits and forms the next group', async () => {
    const { g, runs } = recorded(1, 100);
    const first = g.submit(1);
    await turn();
    const later = [g.submit(2), g.submit(3)];
    await turn();
    expect(runs.map((r) => r.items)).toEqual([[1]]);
    runs[0].end();
    expect(await first).toBe('done 1');
    await turnsUntil(() => runs.length === 2);
    expect(runs.map((r) => r.items)).toEqual([[1], [2, 3]]);
    runs[1].end();
    expect(await Promise.all(later)).toEqual(['done 2', 'done 3']);
  });

  it('fails every item of a group whose run fails, and goes on with the next group', async () => {
    const { g, runs } = recorded(1, 100);
    const failed = [g.submit(1), g.submit(2)];
    await turn();
    const next = g.submit(3);
    runs[0].end(new Error('the database went away'));
    for (const f of failed) await expect(f).rejects.toThrow('the database went away');
    await turnsUntil(() => runs.length === 2);
    expect(runs.map((r) => r.items)).toEqual([[1, 2], [3]]);
    runs[1].end();
    expect(await next).toBe('done 3');
  });

  it('fails an item its group left without a result', async () => {
    const g = gather<number, string>({
      maxInFlight: 1,
      maxWeight: 10,
      weight: () => 1,
      run: async (items, done) => done(0, Promise.resolve('only the first')),
    });
    const [a, b] = [g.submit(1), g.submit(2)];
    expect(await a).toBe('only the first');
    await expect(b).rejects.toThrow('without a result');
  });
});
