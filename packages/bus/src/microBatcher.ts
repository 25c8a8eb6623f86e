export interface MicroBatcherOptions<T> {
  /** How long the first item of a batch waits for company, when no flush is running. */
  lingerMs: number;
  /** A batch is flushed at once when it weighs this much. */
  maxWeight: number;
  weight?: (item: T) => number;
  flush(items: T[]): Promise<void>;
}

export interface MicroBatcher<T> {
  /** Resolves when the batch holding item was flushed; rejects with that flush's error. */
  add(item: T): Promise<void>;
  /** Flushes what is pending and waits for every flush in progress. */
  close(): Promise<void>;
}

/**
 * Gathers concurrent callers into one flush. Flushes never overlap: while one runs, the next batch fills,
 * so under load the batch size follows the round-trip time and idle latency stays at lingerMs.
 */
export function createMicroBatcher<T>(opts: MicroBatcherOptions<T>): MicroBatcher<T> {
  // The weight is taken once per item: weighing may be dear (the Kafka adapter counts bytes).
  type Pending = { item: T; weight: number; resolve: () => void; reject: (e: unknown) => void };
  const weight = opts.weight ?? (() => 1);
  const queue: Pending[] = [];
  let queued = 0;
  let timer: NodeJS.Timeout | null = null;
  let inFlight: Promise<void> | null = null;

  const schedule = () => {
    if (inFlight || timer || queue.length === 0) return;
    if (queued >= opts.maxWeight || opts.lingerMs === 0) void run();
    else timer = setTimeout(() => void run(), opts.lingerMs);
  };

  const run = async () => {
    if (timer) clearTimeout(timer);
    timer = null;
    if (inFlight || queue.length === 0) return;
    const batch: Pending[] = [];
    let w = 0;
    while (queue.length > 0 && (batch.length === 0 || w + queue[0].weight <= opts.maxWeight)) {
      const p = queue.shift()!;
      w += p.weight;
      batch.push(p);
    }
    queued -= w;
    inFlight = (async () => {
      try {
        await opts.flush(batch.map((p) => p.item));
        for (const p of batch) p.resolve();
      } catch (e) {
        for (const p of batch) p.reject(e);
      }
    })();
    await inFlight;
    inFlight = null;
    // What arrived during the flush has already waited a round trip: send it now.
    if (queue.length > 0) void run();
  };

  return {
    add(item) {
      return new Promise<void>((resolve, reject) => {
        const w = weight(item);
        queue.push({ item, weight: w, resolve, reject });
        queued += w;
        if (queued >= opts.maxWeight && !inFlight) void run();
        else schedule();
      });
    },
    async close() {
      while (queue.length > 0 || inFlight) {
        if (inFlight) await inFlight;
        else await run();
      }
    },
  };
}

/**
 * One micro-batcher per key (ingest's: the shop): flushes of one key never overlap, those of different keys may.
 * With one batcher for every shop, a shop's bulk of 100 new contacts held up every other shop's single event for
 * its whole flush (a small request waited a round of INSERTs it had no part in); now one producer's large batches
 * delay only its own requests. A key's batcher is dropped once nothing of it is pending.
 */
export function createKeyedMicroBatcher<T>(opts: MicroBatcherOptions<T> & { key: (item: T) => string }): MicroBatcher<T> {
  const byKey = new Map<string, { batcher: MicroBatcher<T>; pending: number }>();
  return {
    async add(item) {
      const k = opts.key(item);
      let entry = byKey.get(k);
      if (!entry) {
        entry = { batcher: createMicroBatcher(opts), pending: 0 };
        byKey.set(k, entry);
      }
      entry.pending++;
      try {
        await entry.batcher.add(item);
      } finally {
        if (--entry.pending === 0 && byKey.get(k) === entry) byKey.delete(k);
      }
    },
    async close() {
      await Promise.all([...byKey.values()].map((e) => e.batcher.close()));
    },
  };
}
