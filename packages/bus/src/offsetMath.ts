/**
 * Arithmetic on log offsets, written once for the adapters and their callers: a group's lag on a partition,
 * the records a partition holds, the records one set of positions lacks to reach another, and the time left
 * at a rate. Offsets are 64-bit: decimal strings (as the port gives them) or bigints, never added as numbers;
 * the counts they come to are numbers.
 */

/** A log offset: a decimal string, as the port carries it, or a bigint. */
export type Offset = string | bigint;

const big = (o: Offset): bigint => (typeof o === 'bigint' ? o : BigInt(o));

/** Records from `position` up to the log end `high`: 0 when the position is at or past it. */
export function recordsBefore(position: Offset, high: Offset): number {
  const d = big(high) - big(position);
  return d > 0n ? Number(d) : 0;
}

/**
 * A group's lag on one partition: from its committed position to the log end. A group with no position there
 * (null, or a negative offset, which Kafka answers for none) starts at the log start, `low`.
 */
export function partitionLag(p: { low: Offset; high: Offset }, committed: Offset | null): number {
  const c = committed === null ? null : big(committed);
  return recordsBefore(c === null || c < 0n ? p.low : c, p.high);
}

/** The records the partitions hold, from each one's first offset still in the log to its end, summed. */
export function recordsHeld(partitions: readonly { low: Offset; high: Offset }[]): number {
  return partitions.reduce((n, p) => n + Number(big(p.high) - big(p.low)), 0);
}

/** The lags of partitions, summed. */
export function totalLag(partitions: readonly { lag: number }[]): number {
  return partitions.reduce((n, p) => n + p.lag, 0);
}

/**
 * The records positions `have` still lack to reach positions `want`, per partition, summed: a partition
 * absent from `have` is at offset 0; one past its `want` counts nothing.
 */
export function recordsBehind(want: ReadonlyMap<number, bigint>, have: ReadonlyMap<number, bigint>): number {
  let behind = 0n;
  for (const [p, next] of want) {
    const at = have.get(p) ?? 0n;
    if (next > at) behind += next - at;
  }
  return Number(behind);
}

/** Seconds until `remaining` records are done at `perSecond`: 0 when none remain, null when no rate tells. */
export function etaSeconds(remaining: number, perSecond: number): number | null {
  return perSecond > 0 ? remaining / perSecond : remaining === 0 ? 0 : null;
}
