import { randomUUID } from 'node:crypto';
import type { Admin, Kafka } from 'kafkajs';
import { BusUnavailableError, type BusRecord, type ReadOptions } from '../port.js';
import { toRecord } from './consumer.js';

/** The kafkajs adapter's Bus.read. */

/** What the reader takes of the bus's admin (kafkajsAdmin). */
interface ReaderAdmin {
  admin: Admin;
  connectAdmin(): Promise<void>;
  deleteGroup(groupId: string): Promise<boolean>;
}

export function kafkajsReader(kafka: Kafka, opts: { clientId: string }, { admin, connectAdmin, deleteGroup }: ReaderAdmin) {
  /**
   * kafkajs has no consumer without a group (no manual assignment): `read` consumes in a group of its own
   * that commits nothing, then deletes it. The log ends are taken first; each partition is done once its
   * record just below that end (or `limit` records) arrived. Offsets are dense on Shopstream's topics (no
   * transactions, no compaction), so that record exists.
   */
  const readTopic = async (topic: string, ro: ReadOptions): Promise<BusRecord[]> => {
    if (ro.fromOffset !== undefined && ro.partition === undefined) throw new Error('read: fromOffset needs a partition');
    await connectAdmin();
    const ends = await admin.fetchTopicOffsets(topic);
    if (ro.partition !== undefined && !ends.some((e) => e.partition === ro.partition))
      throw new Error(`read: topic "${topic}" has no partition ${ro.partition}`);
    const wanted = new Map<number, { from: bigint; last: bigint; records: BusRecord[]; done: boolean }>();
    for (const e of ends) {
      if (ro.partition !== undefined && e.partition !== ro.partition) continue;
      const low = BigInt(e.low);
      const from = ro.fromOffset !== undefined && BigInt(ro.fromOffset) > low ? BigInt(ro.fromOffset) : low;
      if (from < BigInt(e.high) && ro.limit !== 0) wanted.set(e.partition, { from, last: BigInt(e.high) - 1n, records: [], done: false });
    }
    if (wanted.size === 0) return [];

    const groupId = `${opts.clientId}-read-${randomUUID()}`;
    const consumer = kafka.consumer({ groupId, allowAutoTopicCreation: false, maxWaitTimeInMs: 100, retry: { retries: 5 } });
    let progressAt = Date.now();
    let settle!: (e?: unknown) => void;
    const finished = new Promise<void>((resolve, reject) => (settle = (e) => (e ? reject(e) : resolve())));
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      if (!payload.restart) settle(new BusUnavailableError(`reading ${topic} failed: ${payload.error.message}`, { cause: payload.error }));
    });
    const stalled = setInterval(() => {
      if (Date.now() - progressAt > 30_000) settle(new BusUnavailableError(`reading ${topic}: no record arrived for 30 s`));
    }, 1_000);
    try {
      await consumer.connect();
      await consumer.subscribe({ topic, fromBeginning: true });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        eachBatch: async ({ batch, resolveOffset }) => {
          if (batch.messages.length === 0) return;
          resolveOffset(batch.messages[batch.messages.length - 1].offset);
          const w = wanted.get(batch.partition);
          if (!w || w.done) return;
          progressAt = Date.now();
          for (const m of batch.messages) {
            const offset = BigInt(m.offset);
            const prev = w.records.length > 0 ? BigInt(w.records[w.records.length - 1].offset) : w.from - 1n;
            // Before the seek took effect, or fetched again after it: not ours, or had already.
            if (offset <= prev || offset > w.last) continue;
            w.records.push(toRecord(topic, batch.partition, m));
            if (offset === w.last || w.records.length === ro.limit) {
              w.done = true;
              break;
            }
          }
          if ([...wanted.values()].every((x) => x.done)) settle();
        },
      });
      for (const [partition, w] of wanted) consumer.seek({ topic, partition, offset: w.from.toString() });
      const others = ends.map((e) => e.partition).filter((p) => !wanted.has(p));
      if (others.length > 0) consumer.pause([{ topic, partitions: others }]);
      await finished;
    } finally {
      clearInterval(stalled);
      await consumer.disconnect().catch(() => {});
      // The group left as the consumer disconnected; the broker may take a moment to see it empty.
      for (let i = 0; i < 20 && !(await deleteGroup(groupId).catch(() => true)); i++) await new Promise((r) => setTimeout(r, 100));
    }
    return [...wanted.keys()].sort((a, b) => a - b).flatMap((p) => wanted.get(p)!.records);
  };
  return readTopic;
}
