import { Consumer, type Admin } from '@platformatic/kafka';
import { BusUnavailableError, type BusRecord, type ReadOptions } from '../port.js';
import { forceClose, headersOf, type ClientBase } from './client.js';

/** The @platformatic/kafka adapter's Bus.read. */

/** Bit 5 of a record batch's attributes: a transaction marker, not a record. */
const IS_CONTROL_BATCH = 1 << 5;

/** What the reader takes of the bus's admin (platformaticAdmin). */
interface ReaderAdmin {
  admin: Admin;
  partitionOffsets(topic: string): Promise<{ partition: number; low: bigint; high: bigint }[]>;
}

export function platformaticReader(base: ClientBase, opts: { clientId: string }, { admin, partitionOffsets }: ReaderAdmin) {
  // Fetches for `read`: a consumer that never joins a group (it only sends Fetch requests to partition leaders).
  let reader: Consumer | null = null;
  const readTopic = async (topic: string, ro: ReadOptions): Promise<BusRecord[]> => {
    if (ro.fromOffset !== undefined && ro.partition === undefined) throw new Error('read: fromOffset needs a partition');
    const ends = await partitionOffsets(topic);
    if (ro.partition !== undefined && !ends.some((e) => e.partition === ro.partition))
      throw new Error(`read: topic "${topic}" has no partition ${ro.partition}`);
    const md = await admin.metadata({ topics: [topic] });
    const { id: topicId, partitions } = md.topics.get(topic)!;
    reader ??= new Consumer({ ...base, clientId: `${opts.clientId}-read`, groupId: `${opts.clientId}-read`, retries: 3 });
    const out: BusRecord[] = [];
    for (const e of ends) {
      if (ro.partition !== undefined && e.partition !== ro.partition) continue;
      let next = ro.fromOffset !== undefined && BigInt(ro.fromOffset) > e.low ? BigInt(ro.fromOffset) : e.low;
      const records: BusRecord[] = [];
      let progressAt = Date.now();
      while (next < e.high && (ro.limit === undefined || records.length < ro.limit)) {
        const res = await reader.fetch({
          node: partitions[e.partition].leader,
          maxWaitTime: 100,
          topics: [
            {
              topicId,
              partitions: [{ partition: e.partition, fetchOffset: next, currentLeaderEpoch: -1, lastFetchedEpoch: -1, partitionMaxBytes: 4 * 1024 * 1024 }],
            },
          ],
        });
        const before = next;
        for (const batch of res.responses[0]?.partitions[0]?.records ?? []) {
          next = batch.firstOffset + BigInt(batch.lastOffsetDelta) + 1n > next ? batch.firstOffset + BigInt(batch.lastOffsetDelta) + 1n : next;
          if (batch.attributes & IS_CONTROL_BATCH) continue;
          for (const r of batch.records) {
            const offset = batch.firstOffset + BigInt(r.offsetDelta);
            if (offset < before || offset >= e.high || (ro.limit !== undefined && records.length >= ro.limit)) continue;
            records.push({
              topic,
              partition: e.partition,
              offset: offset.toString(),
              key: r.key ? r.key.toString() : null,
              value: r.value ?? Buffer.alloc(0),
              headers: headersOf(r.headers),
              timestamp: Number(batch.firstTimestamp + r.timestampDelta),
            });
          }
        }
        if (next > before) progressAt = Date.now();
        else if (Date.now() - progressAt > 30_000) throw new BusUnavailableError(`reading ${topic}: no record arrived for 30 s`);
      }
      out.push(...records);
    }
    return out;
  };

  return {
    read: readTopic,
    async close() {
      if (reader) await forceClose(reader).catch(() => {});
    },
  };
}
