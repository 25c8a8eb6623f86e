import { queryRows, sql, type Db } from '@shopstream/db';

export interface TrimmedPartition {
  topic: string;
  partition: number;
  deleted: number;
}

/**
 * Deletes the records of topics with a finite retention (bus_topics.retention_ms > 0) that are older than it,
 * by created_at. Like Kafka, which drops whole segments whose newest record has expired, it only ever removes
 * a prefix of a partition: it stops at the first record still young, even if older ones follow it (created_at
 * is the appending transaction's start, so it is not strictly monotonic in offset order). The first offset
 * held then moves up, as bus.offsets() reports, and offsets stay dense above it. Topics kept forever
 * (retention_ms = -1: source and dead-letter topics) are never read here. Each DELETE takes at most
 * `batchSize` records, so a large backlog never holds one long transaction (or PGlite's one connection).
 */
export async function trimExpiredRecords(db: Db, opts: { batchSize?: number } = {}): Promise<TrimmedPartition[]> {
  const batchSize = opts.batchSize ?? 1_000;
  const partitions = await queryRows(
    db,
    sql`
    SELECT p.topic, p.partition, t.retention_ms
    FROM bus_topics t JOIN bus_partitions p ON p.topic = t.topic
    WHERE t.retention_ms > 0
    ORDER BY p.topic, p.partition`,
    (r) => ({ topic: String(r.topic), partition: Number(r.partition), retention_ms: String(r.retention_ms) }),
  );
  const out: TrimmedPartition[] = [];
  for (const p of partitions) {
    const cutoff = sql`now() - (${String(p.retention_ms)}::bigint * interval '1 millisecond')`;
    let deleted = 0;
    for (;;) {
      const [head] = await queryRows(
        db,
        sql`
        SELECT min("offset") AS low,
               COALESCE(min("offset") FILTER (WHERE created_at >= ${cutoff}), max("offset") + 1) AS upto
        FROM (SELECT "offset", created_at FROM bus_records
              WHERE topic = ${p.topic} AND partition = ${p.partition}
              ORDER BY "offset" LIMIT ${batchSize}) head`,
        (r) => (r.low === null ? null : { low: BigInt(r.low as string), upto: BigInt(r.upto as string) }),
      );
      if (head === null || head.upto <= head.low) break;
      const [n] = await queryRows(
        db,
        sql`
        WITH gone AS (
          DELETE FROM bus_records
          WHERE topic = ${p.topic} AND partition = ${p.partition} AND "offset" < ${head.upto.toString()}::bigint
          RETURNING 1)
        SELECT count(*)::int AS n FROM gone`,
        (r) => Number(r.n),
      );
      deleted += n;
      // A short head means the young record (or the log end) was reached within this batch.
      if (head.upto - head.low < BigInt(batchSize)) break;
    }
    if (deleted > 0) out.push({ topic: p.topic, partition: p.partition, deleted });
  }
  return out;
}
