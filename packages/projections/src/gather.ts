/**
 * Gathers work handed over in the same turn of the event loop into groups, each run by one call of `run`: the
 * batches of different partitions that a consumer hands over together (one fetch's records) become one transaction
 * instead of one each. At most `maxInFlight` groups run at once; what arrives meanwhile waits and forms the next
 * group. A group takes items until their weight passes `maxWeight` (it always takes one), so a backlog's large
 * batches still run side by side, as many at once as before, and only small batches are merged.
 */
export interface GatherOptions<I, R> {
  maxInFlight: number;
  maxWeight: number;
  weight(item: I): number;
  /**
   * Runs a group: settles every item's result through `done`, in any order, before its promise resolves. A
   * rejection of `run` itself fails the items it left unsettled.
   */
  run(items: I[], done: (index: number, result: Promise<R>) => void): Promise<void>;
}

export interface Gatherer<I, R> {
  /** Runs the item in the next group that has room; resolves or rejects as its result does. */
  submit(item: I): Promise<R>;
}

export function gather<I, R>(o: GatherOptions<I, R>): Gatherer<I, R> {
  type Waiting = { item: I; settle: (r: Promise<R>) => void };
  const queue: Waiting[] = [];
  let inFlight = 0;
  let scheduled = false;

  const schedule = () => {
    if (scheduled) return;
    scheduled = true;
    // On the next turn: whatever else is handed over in this one joins the group.
    setImmediate(pump);
  };
  const pump = () => {
    scheduled = false;
    while (inFlight < o.maxInFlight && queue.length > 0) {
      let weight = 0;
      let n = 0;
      while (n < queue.length && (n === 0 || weight + o.weight(queue[n].item) <= o.maxWeight)) weight += o.weight(queue[n++].item);
      const group = queue.splice(0, n);
      inFlight++;
      const settled = new Set<number>();
      const done = (i: number, r: Promise<R>) => {
        if (settled.has(i)) return;
        settled.add(i);
        group[i].settle(r);
      };
      void o
        .run(
          group.map((w) => w.item),
          done,
        )
        .catch((e: unknown) => group.forEach((_, i) => settled.has(i) || done(i, Promise.reject(e))))
        .finally(() => {
          group.forEach((_, i) => settled.has(i) || done(i, Promise.reject(new Error('the group ended without a result for this item'))));
          inFlight--;
          if (queue.length > 0) schedule();
        });
    }
  };

  return {
    submit: (item) =>
      new Promise<R>((resolve) => {
        queue.push({ item, settle: resolve });
        schedule();
      }),
  };
}
