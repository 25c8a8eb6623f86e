import { sql, type Queryable, type SQLQuery } from '@shopstream/db';
import type { OutgoingRecord } from '../port.js';
import { partitionFor } from './partitionFor.js';

/** Every append NOTIFYs this channel with the topic's name, so consumers wake without polling. */
export const busNotifyChannel = 'shopstream_bus';

/** Rows per INSERT: far below Postgres's 65535 bind parameters (6 per row). */
const insertChunk = 1_000;

/** The topic was never created: publishing to it again will not help, so this is not BusUnavailableError. */
export class UnknownTopicError extends Error {
  constructor(readonly topics: string[]) {
    super(`Unknown topic${topics.length > 1 ? 's' : ''} ${topics.map((t) => `"${t}"`).join(', ')} on the Postgres-log bus: create ${topics.length > 1 ? 'them' : 'it'} with ensureTopics first`);
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
 * Appends records inside the caller's transaction. Each touched partition's row is locked and its
 * next_offset moved past the new records, so appends to one partition take turns: offsets are dense
 * and commit in offset order, and a reader that saw offset n has seen every offset below n.
 * The NOTIFY goes out when the transaction commits.
 */
export async function appendRecords(tx: Queryable, items: AppendItem[]): Promise<AppendedRange[]> {
  const groups = new Map<string, { topic: string; partition: number; records: OutgoingRecord[] }>();
  for (const item of items) {
    for (const r of item.records) {
      const partition = partitionFor(r.key, item.partitions);
      const id = `${item.topic}\u0000${partition}`;
      let g = groups.get(id);
      if (!g) groups.set(id, (g = { topic: item.topic, partition, records: [] }));
      g.records.push(r);
    }
  }
  if (groups.size === 0) return [];
  const wanted = [...groups.values()];

  // One statement locks every partition in one fixed order, so two appends never wait on each other in a cycle.
  const locked = await tx.query(sql`
    SELECT topic, partition, next_offset FROM bus_partitions
    WHERE (topic, partition) IN (${sql.join(
      wanted.map((g) => sql`(${g.topic}::text, ${g.partition}::integer)`),
      sql`, `,
    )})
    ORDER BY topic, partition
    FOR UPDATE`);
  const start = new Map<string, bigint>(locked.map((r) => [`${r.topic}\u0000${r.partition}`, BigInt(r.next_offset)]));
  const missing = [...new Set(wanted.filter((g) => !start.has(`${g.topic}\u0000${g.partition}`)).map((g) => g.topic))];
  if (missing.length > 0) throw new UnknownTopicError(missing);

  await tx.query(sql`
    UPDATE bus_partitions AS p SET next_offset = p.next_offset + v.n
    FROM (VALUES ${sql.join(
      wanted.map((g) => sql`(${g.topic}::text, ${g.partition}::integer, ${g.records.length}::bigint)`),
      sql`, `,
    )}) AS v (topic, partition, n)
    WHERE p.topic = v.topic AND p.partition = v.partition`);

  const rows: SQLQuery[] = [];
  const ranges: AppendedRange[] = [];
  for (const g of wanted) {
    const first = start.get(`${g.topic}\u0000${g.partition}`)!;
    ranges.push({ topic: g.topic, partition: g.partition, firstOffset: first.toString(), count: g.records.length });
    g.records.forEach((r, i) => {
      const value = typeof r.value === 'string' ? Buffer.from(r.value, 'utf8') : r.value;
      rows.push(sql`(${g.topic}, ${g.partition}, ${(first + BigInt(i)).toString()}::bigint, ${r.key}, ${value}::bytea, ${JSON.stringify(r.headers ?? {})}::jsonb)`);
    });
  }
  for (let i = 0; i < rows.length; i += insertChunk) {
    await tx.query(sql`INSERT INTO bus_records (topic, partition, "offset", key, value, headers) VALUES ${sql.join(rows.slice(i, i + insertChunk), sql`, `)}`);
  }
  const topics = [...new Set(wanted.map((g) => g.topic))];
  await tx.query(sql`SELECT pg_notify(${busNotifyChannel}, t) FROM (VALUES ${sql.join(topics.map((t) => sql`(${t}::text)`), sql`, `)}) AS v (t)`);
  return ranges;
}
