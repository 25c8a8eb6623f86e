import { randomUUID } from 'node:crypto';
import { queryRows, sql, type Db } from '@shopstream/db';
import { headers as H } from '@shopstream/contracts';
import type { Logger } from '@shopstream/telemetry';
import type { Bus, BusRecord, OutgoingRecord } from './port.js';

/** The headers sendToDeadLetters adds: stripped from a record sent back, which gets its original headers. */
const dlqHeaders: readonly string[] = [H.dlqReason, H.dlqSourceTopic, H.dlqSourcePartition, H.dlqSourceOffset];

/** What a redrive recorded about one dead letter. */
export interface RedriveMark {
  state: 'sending' | 'sent';
  runId: string;
  /** When it was sent ('sent'), or claimed by a run that has not confirmed it ('sending'). */
  at: string;
}

/** One record of a dead-letter topic, with the context its headers carry. */
export interface DeadLetter {
  /** Its place in the dead-letter topic. */
  topic: string;
  partition: number;
  offset: string;
  /** Where it came from (null when a header is missing: not written by Shopstream's projections). */
  sourceTopic: string | null;
  sourcePartition: number | null;
  sourceOffset: string | null;
  key: string | null;
  reason: string | null;
  /** When the dead-letter topic took it. */
  deadLetteredAt: string;
  redriven: RedriveMark | null;
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

/** What a redrive recorded for the records of one page (one partition), by offset. */
async function marksOf(db: Db, topic: string, page: BusRecord[]): Promise<Map<string, RedriveMark & { stale: boolean }>> {
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

function deadLetterOf(r: BusRecord, mark: RedriveMark | null): DeadLetter {
  const h = r.headers;
  const original = Object.fromEntries(Object.entries(h).filter(([k]) => !dlqHeaders.includes(k)));
  const partition = h[H.dlqSourcePartition];
  return {
    topic: r.topic,
    partition: r.partition,
    offset: r.offset,
    sourceTopic: h[H.dlqSourceTopic] ?? null,
    sourcePartition: partition !== undefined && /^\d+$/.test(partition) ? Number(partition) : null,
    sourceOffset: h[H.dlqSourceOffset] ?? null,
    key: r.key,
    reason: h[H.dlqReason] ?? null,
    deadLetteredAt: new Date(r.timestamp).toISOString(),
    redriven: mark,
    headers: original,
    value: r.value,
  };
}

/** Every dead letter of a dead-letter topic (to its end when called), in partition and offset order, with what redrives did to it. */
export async function listDeadLetters(bus: Bus, db: Db, topic: string, filter: DeadLetterFilter = {}): Promise<DeadLetter[]> {
  const out: DeadLetter[] = [];
  for await (const page of pages(bus, topic)) {
    const marks = await marksOf(db, topic, page);
    for (const r of page) {
      const m = marks.get(r.offset);
      const d = deadLetterOf(r, m ? { state: m.state, runId: m.runId, at: m.at } : null);
      if (matches(d, filter)) out.push(d);
    }
  }
  return out;
}

export interface RedriveOptions extends DeadLetterFilter {
  bus: Bus;
  db: Db;
  logger: Logger;
  /** Count what would be sent, send nothing, record nothing. */
  dryRun?: boolean;
}

export interface RedriveReport {
  topic: string;
  /** The source topic the records were sent back to. */
  to: string;
  runId: string;
  dryRun: boolean;
  /** Dead letters in the topic when the redrive started. */
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
}

/**
 * Sends the dead letters of `topic` (`<source>.dlq`) back to their source topic, with their key, value and
 * original headers (the dlq_* ones removed, `redriven_from` added), page by page in log order.
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
  const to = sourceOfDeadLetterTopic(topic);
  if (!to) throw new Error(`${topic} is not a dead-letter topic (<topic>.dlq)`);
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
  };

  for await (const page of pages(bus, topic)) {
    report.total += page.length;
    const marks = await marksOf(db, topic, page);
    const fresh: DeadLetter[] = [];
    const stale: DeadLetter[] = [];
    for (const r of page) {
      const d = deadLetterOf(r, null);
      const m = marks.get(r.offset);
      if (!matches(d, o)) report.notMatching++;
      else if (d.sourceTopic !== to) report.unredrivable++;
      else if (m?.state === 'sent') report.alreadyRedriven++;
      else if (m && !m.stale) report.inFlight++;
      else (m ? stale : fresh).push(d);
    }
    if (o.dryRun) {
      report.redriven += fresh.length + stale.length;
      report.resent += stale.length;
      continue;
    }
    if (fresh.length + stale.length === 0) continue;

    // The claim: a row inserted, or a stale claim taken over, by this run. What another run claimed in the
    // meantime is not returned, and is left to it.
    const claimed = await db.tx(async (tx) => {
      const got = new Set<string>();
      if (fresh.length > 0) {
        const rows = await tx.query(sql`
          INSERT INTO dlq_redrives (dlq_topic, dlq_partition, dlq_offset, source_topic, source_partition, source_offset, reason, run_id, state)
          SELECT ${topic}, ${page[0].partition}, o, ${to}, sp, so, reason, ${runId}, 'sending'
          FROM unnest(${fresh.map((d) => d.offset)}::bigint[], ${fresh.map((d) => d.sourcePartition)}::int[],
                      ${fresh.map((d) => (d.sourceOffset !== null && /^\d+$/.test(d.sourceOffset) ? d.sourceOffset : null))}::bigint[],
                      ${fresh.map((d) => d.reason)}::text[]) AS v (o, sp, so, reason)
          ON CONFLICT DO NOTHING
          RETURNING dlq_offset`);
        for (const r of rows) got.add(String(r.dlq_offset));
      }
      if (stale.length > 0) {
        const rows = await tx.query(sql`
          UPDATE dlq_redrives SET run_id = ${runId}, claimed_at = now()
          WHERE dlq_topic = ${topic} AND dlq_partition = ${page[0].partition} AND dlq_offset = ANY(${stale.map((d) => d.offset)}::bigint[])
            AND state = 'sending' AND claimed_at < now() - make_interval(secs => ${CLAIM_TIMEOUT_SECONDS})
          RETURNING dlq_offset`);
        for (const r of rows) got.add(String(r.dlq_offset));
      }
      return got;
    });
    const sending = [...fresh, ...stale].filter((d) => claimed.has(d.offset)).sort((a, b) => Number(BigInt(a.offset) - BigInt(b.offset)));
    report.inFlight += fresh.length + stale.length - sending.length;
    if (sending.length === 0) continue;

    const records: OutgoingRecord[] = sending.map((d) => ({
      key: d.key ?? '',
      value: d.value,
      headers: { ...d.headers, [H.redrivenFrom]: `${d.topic}/${d.partition}/${d.offset}` },
    }));
    const offsets = sending.map((d) => d.offset);
    try {
      await bus.publish(to, records);
    } catch (e) {
      // Not taken (as far as the log said): release the claims, so the next run sends them without waiting.
      await db
        .query(
          sql`DELETE FROM dlq_redrives WHERE dlq_topic = ${topic} AND dlq_partition = ${page[0].partition} AND dlq_offset = ANY(${offsets}::bigint[]) AND run_id = ${runId} AND state = 'sending'`,
        )
        .catch((e2) => log.warn({ err: e2 }, 'could not release the claims of a failed redrive; the next run takes them over after the claim timeout'));
      throw e;
    }
    await db.query(sql`
      UPDATE dlq_redrives SET state = 'sent', sent_at = now()
      WHERE dlq_topic = ${topic} AND dlq_partition = ${page[0].partition} AND dlq_offset = ANY(${offsets}::bigint[]) AND run_id = ${runId}`);
    report.redriven += sending.length;
    report.resent += sending.filter((d) => stale.includes(d)).length;
    log.info({ partition: page[0].partition, from: offsets[0], to: offsets[offsets.length - 1], records: sending.length }, 'dead letters sent back');
  }
  return report;
}
