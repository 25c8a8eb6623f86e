import { isNoDataFound, queryRows, sql, type Queryable } from '@shopstream/db';
import type { OutgoingRecord } from '../port.js';
import { partitionFor } from './partitionFor.js';

/** Every append NOTIFYs this channel with the topic's name, so consumers wake without polling. */
export const busNotifyChannel = 'shopstream_bus';

/** The topic was never created: publishing to it again will not help, so this is not BusUnavailableError. */
export class UnknownTopicError extends Error {
  constructor(readonly topics: string[]) {
    super(
      `Unknown topic${topics.length > 1 ? 's' : ''} ${topics.map((t) => `"${t}"`).join(', ')} on the Postgres-log bus: create ${topics.length > 1 ? 'them' : 'it'} with ensureTopics first`,
    );
    this.name = 'UnknownTopicError';
  }
}

export interface AppendItem {
  topic: string;
  /** The topic's partition count, as bus_topics holds it. */
  partitions: number;
  records: OutgoingRecord[];
}

export interface AppendedRange {
  topic: string;
  partition: number;
  /** Offset of the range's first record, decimal. */
  firstOffset: string;
  count: number;
}

/**
 * Appends records, inside the caller's transaction or, given the pool, as one autocommit statement. Each
 * touched partition's row is locked and its next_offset moved past the new records, so appends to one
 * partition take turns: offsets are dense and commit in offset order, and a reader that saw offset n has
 * seen every offset below n. The NOTIFY goes out when the transaction commits.
 */
export async function appendRecords(tx: Queryable, items: AppendItem[]): Promise<AppendedRange[]> {
  const topic: string[] = [];
  const partition: number[] = [];
  const key: (string | null)[] = [];
  const value: string[] = [];
  const headers: string[] = [];
  for (const item of items) {
    for (const r of item.records) {
      topic.push(item.topic);
      partition.push(partitionFor(r.key, item.partitions));
      key.push(r.key);
      value.push((typeof r.value === 'string' ? Buffer.from(r.value, 'utf8') : r.value).toString('hex'));
      headers.push(JSON.stringify(r.headers ?? {}));
    }
  }
  if (topic.length === 0) return [];
  // bus_append (migration 014): lock, move next_offset, insert, NOTIFY, in one statement and one round trip.
  let rows: { topic: string; partition: number; firstOffset: string; count: number }[];
  try {
    rows = await queryRows(
      tx,
      sql`
      SELECT topic, partition, first_offset, n FROM bus_append(${topic}::text[], ${partition}::integer[], ${key}::text[], ${value}::text[], ${headers}::text[])`,
      (r) => ({ topic: String(r.topic), partition: Number(r.partition), firstOffset: String(r.first_offset), count: Number(r.n) }),
    );
  } catch (e) {
    const detail = (e as { detail?: unknown }).detail;
    if (isNoDataFound(e) && typeof detail === 'string') throw new UnknownTopicError(detail.split(','));
    throw e;
  }
  return rows.sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition));
}
