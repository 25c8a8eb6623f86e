import { randomUUID } from 'node:crypto';
import { queryRows, sql, type Db } from '@shopstream/db';
import { headers as H } from '@shopstream/contracts';
import type { Logger } from '@shopstream/telemetry';
import type { Bus, BusRecord, OutgoingRecord } from '@shopstream/bus';

/** The headers sendToDeadLetters adds: stripped from a record sent back, which gets its original headers. */
const dlqHeaders: readonly string[] = [H.dlqReason, H.dlqSourceTopic, H.dlqSourcePartition, H.dlqSourceOffset];

/** What a redrive recorded about one dead letter. */
export interface RedriveMark {
  state: 'sending' | 'sent';
  runId: string;
  /** When it was sent ('sent'), or claimed by a run that has not confirmed it ('sending'). */
  at: string;
}

/**
 * One dead letter: a record of a source topic that its consumer could not apply, with every copy of it the
 * dead-letter topic holds. A redriven copy that failed again is the same dead letter (its `redriven_from` leads
 * back to the first), so a record that can never succeed stays one dead letter however often it is redriven.
 */
export interface DeadLetter {
  /** The place of its latest copy in the dead-letter topic: what a redrive sends. */
  topic: string;
  partition: number;
  offset: string;
  /** The record that first failed (null when a header is missing: not written by Shopstream's projections). */
  sourceTopic: string | null;
  sourcePartition: number | null;
  sourceOffset: string | null;
  key: string | null;
  /** Why its latest copy was refused. */
  reason: string | null;
  /** When the dead-letter topic took its latest copy. */
  deadLetteredAt: string;
  /** What a redrive recorded about its latest copy. */
  redriven: RedriveMark | null;
  /** How many times a copy of it was sent back to the source topic. */
  redrives: number;
  /** How many of those copies were refused again and dead-lettered (`dlq redrive --again` sends the latest). */
  failedAgain: number;
  /** Every copy in the dead-letter topic, `<partition>/<offset>`, oldest first. */
  copies: string[];
  /** The record's headers without the dead-letter ones: what a redrive sends. */
  headers: Record<string, string>;
  value: Buffer;
}

export interface DeadLetterFilter {
  /** Only dead letters whose reason contains this text (case-insensitive). */
  reasonContains?: string;
}

const PAGE = 500;
/** A claim older than this was left by a run that stopped: its records are sent again. */
const CLAIM_TIMEOUT_SECONDS = 60;

const matches = (d: { reason: string | null }, f: DeadLetterFilter): boolean =>
  !f.reasonContains || (d.reason ?? '').toLowerCase().includes(f.reasonContains.toLowerCase());

/** The topic a dead-letter topic collects the records of: `events` for `events.dlq`. */
export const sourceOfDeadLetterTopic = (topic: string): string | null => (topic.endsWith('.dlq') ? topic.slice(0, -'.dlq'.length) : null);

/**
 * Reads a topic to the log end it had when called, in pages of one partition. The first read takes the first
 * page of every partition at once: on Kafka each read joins a consumer group (3 s on a broker that keeps the
 * default group.initial.rebalance.delay.ms), so a topic of a few dead letters costs one read, not one per partition.
 */
async function* pages(bus: Bus, topic: string): AsyncGenerator<BusRecord[]> {
  const ends = new Map((await bus.offsets(topic)).filter((p) => BigInt(p.high) > BigInt(p.low)).map((p) => [p.partition, BigInt(p.high)]));
  if (ends.size === 0) return;
  const first = await bus.read(topic, { limit: PAGE });
  for (const [partition, end] of ends) {
    let page = first.filter((r) => r.partition === partition && BigInt(r.offset) < end);
    while (page.length > 0) {
      yield page;
      const from = BigInt(page[page.length - 1].offset) + 1n;
      if (from >= end) break;
      page = (await bus.read(topic, { partition, fromOffset: from.toString(), limit: PAGE })).filter((r) => BigInt(r.offset) < end);
    }
  }
}

type Mark = RedriveMark & { stale: boolean };

/** What a redrive recorded for the records of one page (one partition), by offset. */
async function marksOf(db: Db, topic: string, page: BusRecord[]): Promise<Map<string, Mark>> {
  const rows = await queryRows(
    db,
    sql`
    SELECT dlq_offset, state, run_id, COALESCE(sent_at, claimed_at) AS at,
           claimed_at < now() - make_interval(secs => ${CLAIM_TIMEOUT_SECONDS}) AS stale
    FROM dlq_redrives
    WHERE dlq_topic = ${topic} AND dlq_partition = ${page[0].partition}
      AND dlq_offset BETWEEN ${page[0].offset}::bigint AND ${page[page.length - 1].offset}::bigint`,
    (r) =>
      [
        String(r.dlq_offset),
        { state: r.state as RedriveMark['state'], runId: String(r.run_id), at: new Date(r.at as Date | string).toISOString(), stale: r.stale === true },
      ] as const,
  );
  return new Map(rows);
}

/** One record of the dead-letter topic with the context its headers carry, and what a redrive recorded about it. */
interface Copy {
  record: BusRecord;
  place: string;
  sourceTopic: string | null;
  sourcePartition: number | null;
  sourceOffset: string | null;
  reason: string | null;
  /** The copy this one is a redrive of, `<dlq topic>/<partition>/<offset>`. */
  redrivenFrom: string | undefined;
  mark: Mark | undefined;
}

const placeOf = (r: { topic: string; partition: number; offset: string }) => `${r.topic}/${r.partition}/${r.offset}`;

function copyOf(r: BusRecord, mark: Mark | undefined): Copy {
  const h = r.headers;
  const partition = h[H.dlqSourcePartition];
  return {
    record: r,
    place: placeOf(r),
    sourceTopic: h[H.dlqSourceTopic] ?? null,
    sourcePartition: partition !== undefined && /^\d+$/.test(partition) ? Number(partition) : null,
    sourceOffset: h[H.dlqSourceOffset] ?? null,
    reason: h[H.dlqReason] ?? null,
    redrivenFrom: h[H.redrivenFrom],
    mark,
  };
}

/** A dead letter's copies, oldest first: the first is where it first failed, the last is what a redrive sends. */
interface Group {
  copies: Copy[];
}

/**
 * Every record of a dead-letter topic (to its end when called) with its mark, grouped into dead letters by the
 * record that first failed: a copy whose `redriven_from` names another copy of this topic joins that copy's
 * dead letter. Groups in the order their first copies were read (partition, then offset).
 */
async function readGroups(bus: Bus, db: Db, topic: string): Promise<Group[]> {
  const byPlace = new Map<string, Copy>();
  for await (const page of pages(bus, topic)) {
    const marks = await marksOf(db, topic, page);
    for (const r of page) byPlace.set(placeOf(r), copyOf(r, marks.get(r.offset)));
  }
  // The first copy of a chain of redrives. A copy can only name an older one, so the chain ends; the guard is
  // for hand-written headers.
  const rootOf = (c: Copy): Copy => {
    let at = c;
    for (let hops = 0; at.redrivenFrom && hops < 10_000; hops++) {
      const from = byPlace.get(at.redrivenFrom);
      if (!from) break;
      at = from;
    }
    return at;
  };
  // A copy keyed by where it first failed: two dead-letterings of one source record (a batch delivered again
  // after a crash) are one dead letter as well. Without source headers, by its own place.
  const keyOf = (root: Copy) =>
    root.sourceTopic !== null && root.sourceOffset !== null ? `src:${root.sourceTopic}/${root.sourcePartition}/${root.sourceOffset}` : `dlq:${root.place}`;
  const groups = new Map<string, Group>();
  for (const c of byPlace.values()) {
    const key = keyOf(rootOf(c));
    const g = groups.get(key);
    if (g) g.copies.push(c);
    else groups.set(key, { copies: [c] });
  }
  const older = (a: Copy, b: Copy) =>
    a.record.timestamp - b.record.timestamp || a.record.partition - b.record.partition || Number(BigInt(a.record.offset) - BigInt(b.record.offset));
  for (const g of groups.values()) g.copies.sort(older);
  // In the order their first copies were read: partition, then offset.
  return [...groups.values()];
}

const latest = (g: Group): Copy => g.copies[g.copies.length - 1];

function deadLetterOf(g: Group): DeadLetter {
  const root = g.copies[0];
  const last = latest(g);
  const r = last.record;
  const original = Object.fromEntries(Object.entries(r.headers).filter(([k]) => !dlqHeaders.includes(k)));
  const m = last.mark;
  return {
    topic: r.topic,
    partition: r.partition,
    offset: r.offset,
    sourceTopic: root.sourceTopic,
    sourcePartition: root.sourcePartition,
    sourceOffset: root.sourceOffset,
    key: r.key,
    reason: last.reason,
    deadLetteredAt: new Date(r.timestamp).toISOString(),
    redriven: m ? { state: m.state, runId: m.runId, at: m.at } : null,
    redrives: g.copies.filter((c) => c.mark?.state === 'sent').length,
    failedAgain: g.copies.filter((c) => c.redrivenFrom !== undefined).length,
    copies: g.copies.map((c) => `${c.record.partition}/${c.record.offset}`),
    headers: original,
    value: r.value,
  };
}

/**
 * Every dead letter of a dead-letter topic (to its end when called), once each however often it was redriven,
 * in the order of its first copy (partition, then offset), with what redrives did to it.
 */
export async function listDeadLetters(bus: Bus, db: Db, topic: string, filter: DeadLetterFilter = {}): Promise<DeadLetter[]> {
  return (await readGroups(bus, db, topic)).map(deadLetterOf).filter((d) => matches(d, filter));
}

export interface RedriveOptions extends DeadLetterFilter {
  bus: Bus;
  db: Db;
  logger: Logger;
  /** Count what would be sent, send nothing, record nothing. */
  dryRun?: boolean;
  /** Send dead letters that were redriven and refused again as well (their latest copy). */
  again?: boolean;
}

export interface RedriveReport {
  topic: string;
  /** The source topic the records were sent back to. */
  to: string;
  runId: string;
  dryRun: boolean;
  /** Dead letters in the topic when the redrive started, each once however many copies it has (listDeadLetters). */
  total: number;
  /** Sent back by this run (or that a dry run would send), resent ones included. */
  redriven: number;
  /** Of those, records a run that stopped between publishing and recording had claimed: they may now be in the log twice. */
  resent: number;
  /** Sent back by an earlier run: not sent again. */
  alreadyRedriven: number;
  /** Claimed by another redrive running now: left to it. */
  inFlight: number;
  /** Whose reason does not contain --reason-contains. */
  notMatching: number;
  /** Whose headers do not name this topic's source (not written by Shopstream's dead-lettering): never sent. */
  unredrivable: number;
  /** Redriven before and refused again: sent only when asked (`again`). */
  failedAgain: number;
}

/**
 * Sends the dead letters of `topic` (`<source>.dlq`) back to their source topic, with their key, value and
 * original headers (the dlq_* ones removed, `redriven_from` added), in log order per dead-letter partition.
 * A dead letter is its source record (listDeadLetters): its latest copy is sent, once; one that was redriven
 * and refused again is left alone unless `again` says its cause is gone now.
 *
 * Each page's records are claimed in dlq_redrives ('sending') before they are published, and marked 'sent'
 * after the log took them. Claiming first means two redrives running at once never both send a record, and a
 * record is never recorded as redriven without having been sent: if the process stops between the publish and
 * the mark, the claim outlives it, and a later run (after the claim timeout) sends those records again, once
 * more at most, and says so. That duplicate is harmless: every projection applies a record id once (an
 * activity id, a metric event id, a conversation id), so a second copy inserts nothing and emits nothing. The
 * other order (publish, then record) would send everything twice when two runs overlap.
 */
export async function redriveDeadLetters(topic: string, o: RedriveOptions): Promise<RedriveReport> {
  const { bus, db } = o;
  const source = sourceOfDeadLetterTopic(topic);
  if (!source) throw new Error(`${topic} is not a dead-letter topic (<topic>.dlq)`);
  const to: string = source;
  const runId = randomUUID();
  const log = o.logger.child({ redrive: runId, topic, to });
  const report: RedriveReport = {
    topic,
    to,
    runId,
    dryRun: o.dryRun === true,
    total: 0,
    redriven: 0,
    resent: 0,
    alreadyRedriven: 0,
    inFlight: 0,
    notMatching: 0,
    unredrivable: 0,
    failedAgain: 0,
  };

  const fresh: Copy[] = [];
  const stale = new Set<Copy>();
  for (const g of await readGroups(bus, db, topic)) {
    report.total++;
    const last = latest(g);
    const m = last.mark;
    if (!matches(last, o)) report.notMatching++;
    else if (last.sourceTopic !== to) report.unredrivable++;
    else if (m?.state === 'sent') report.alreadyRedriven++;
    else if (m && !m.stale) report.inFlight++;
    else if (m) stale.add(last);
    // Sent back before and refused again: the cause is not gone, and sending it on every run is what made
    // a poison record go round forever. The operator who fixed it says so (--again).
    else if (g.copies.length > 1 && g.copies.some((c) => c.mark) && !o.again) report.failedAgain++;
    else fresh.push(last);
  }
  if (o.dryRun) {
    report.redriven += fresh.length + stale.size;
    report.resent += stale.size;
    return report;
  }

  // In log order per dead-letter partition, PAGE at a time: each batch's claims are one statement of one partition.
  const byPartition = new Map<number, Copy[]>();
  for (const c of [...fresh, ...stale]) byPartition.set(c.record.partition, [...(byPartition.get(c.record.partition) ?? []), c]);
  for (const [partition, list] of [...byPartition].sort(([a], [b]) => a - b)) {
    list.sort((a, b) => Number(BigInt(a.record.offset) - BigInt(b.record.offset)));
    for (let i = 0; i < list.length; i += PAGE) await sendBatch(partition, list.slice(i, i + PAGE));
  }
  return report;

  async function sendBatch(partition: number, batch: Copy[]): Promise<void> {
    const isStale = (c: Copy) => stale.has(c);
    const freshOnes = batch.filter((c) => !isStale(c));
    const staleOnes = batch.filter(isStale);
    // The claim: a row inserted, or a stale claim taken over, by this run. What another run claimed in the
    // meantime is not returned, and is left to it.
    const claimed = await db.tx(async (tx) => {
      const got = new Set<string>();
      if (freshOnes.length > 0) {
        const rows = await tx.query(sql`
          INSERT INTO dlq_redrives (dlq_topic, dlq_partition, dlq_offset, source_topic, source_partition, source_offset, reason, run_id, state)
          SELECT ${topic}, ${partition}, o, ${to}, sp, so, reason, ${runId}, 'sending'
          FROM unnest(${freshOnes.map((c) => c.record.offset)}::bigint[], ${freshOnes.map((c) => c.sourcePartition)}::int[],
                      ${freshOnes.map((c) => (c.sourceOffset !== null && /^\d+$/.test(c.sourceOffset) ? c.sourceOffset : null))}::bigint[],
                      ${freshOnes.map((c) => c.reason)}::text[]) AS v (o, sp, so, reason)
          ON CONFLICT DO NOTHING
          RETURNING dlq_offset`);
        for (const r of rows) got.add(String(r.dlq_offset));
      }
      if (staleOnes.length > 0) {
        const rows = await tx.query(sql`
          UPDATE dlq_redrives SET run_id = ${runId}, claimed_at = now()
          WHERE dlq_topic = ${topic} AND dlq_partition = ${partition} AND dlq_offset = ANY(${staleOnes.map((c) => c.record.offset)}::bigint[])
            AND state = 'sending' AND claimed_at < now() - make_interval(secs => ${CLAIM_TIMEOUT_SECONDS})
          RETURNING dlq_offset`);
        for (const r of rows) got.add(String(r.dlq_offset));
      }
      return got;
    });
    const sending = batch.filter((c) => claimed.has(c.record.offset));
    report.inFlight += batch.length - sending.length;
    if (sending.length === 0) return;

    const records: OutgoingRecord[] = sending.map((c) => ({
      key: c.record.key ?? '',
      value: c.record.value,
      headers: { ...Object.fromEntries(Object.entries(c.record.headers).filter(([k]) => !dlqHeaders.includes(k))), [H.redrivenFrom]: c.place },
    }));
    const offsets = sending.map((c) => c.record.offset);
    try {
      await bus.publish(to, records);
    } catch (e) {
      // Not taken (as far as the log said): release the claims, so the next run sends them without waiting.
      await db
        .query(
          sql`DELETE FROM dlq_redrives WHERE dlq_topic = ${topic} AND dlq_partition = ${partition} AND dlq_offset = ANY(${offsets}::bigint[]) AND run_id = ${runId} AND state = 'sending'`,
        )
        .catch((e2) => log.warn({ err: e2 }, 'could not release the claims of a failed redrive; the next run takes them over after the claim timeout'));
      throw e;
    }
    await db.query(sql`
      UPDATE dlq_redrives SET state = 'sent', sent_at = now()
      WHERE dlq_topic = ${topic} AND dlq_partition = ${partition} AND dlq_offset = ANY(${offsets}::bigint[]) AND run_id = ${runId}`);
    report.redriven += sending.length;
    report.resent += sending.filter(isStale).length;
    log.info({ partition, from: offsets[0], to: offsets[offsets.length - 1], records: sending.length }, 'dead letters sent back');
  }
}
