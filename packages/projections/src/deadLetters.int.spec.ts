import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, openPglite, sql, type Db } from '@shopstream/db';
import { headers as H } from '@shopstream/contracts';
import { createLogger } from '@shopstream/telemetry';
import { uniquePrefix } from '@shopstream/testkit';
import { type Bus, createPgLogBus, UnknownTopicError, partitionFor } from '@shopstream/bus';
import { sendToDeadLetters } from './projection.js';
import { listDeadLetters, redriveDeadLetters } from './deadLetters.js';

// How a redrive records what it sends, when runs stop half-way or overlap. The commands themselves are
// tested end to end on every bus in test/dlqCli.spec.ts; this is the bus-independent bookkeeping, on PGlite.
const logger = createLogger('dead-letters-test', process.env.TEST_LOG_LEVEL ?? 'silent');
let db: Db;
let bus: Bus;

beforeAll(async () => {
  db = await openPglite(undefined);
  await migrate(db);
  bus = await createPgLogBus({ db, logger, trimIntervalMs: 0 });
});
afterAll(async () => {
  await bus?.close();
  await db?.close();
});

/** Three records on a new source topic, dead-lettered as a projection would, with reasons a, b, c. */
async function threeDeadLetters(opts: { createSource?: boolean } = {}) {
  const source = `${uniquePrefix()}events`;
  const dlq = `${source}.dlq`;
  await bus.ensureTopics([
    { topic: source, partitions: 1 },
    { topic: dlq, partitions: 1 },
  ]);
  await bus.publish(
    source,
    ['a', 'b', 'c'].map((v) => ({ key: 'shop', value: `{"v":"${v}"}`, headers: { [H.shopId]: 'shop' } })),
  );
  const records = await bus.read(source);
  await sendToDeadLetters(
    bus,
    source,
    records.map((record, i) => ({ record, reason: `reason ${'abc'[i]}` })),
  );
  if (opts.createSource === false) await db.query(sql`DELETE FROM bus_topics WHERE topic = ${source}`);
  return { source, dlq };
}

const redriven = async (source: string) =>
  (await bus.read(source)).filter((r) => r.headers[H.redrivenFrom]).map((r) => [r.value.toString(), r.headers[H.redrivenFrom]]);

describe('redriveDeadLetters', () => {
  it('sends again what a stopped run claimed, leaves what a running one claimed, and records who sent what', async () => {
    const { source, dlq } = await threeDeadLetters();
    const stopped = '00000000-0000-4000-8000-000000000001';
    const running = '00000000-0000-4000-8000-000000000002';
    // Offset 0: claimed two minutes ago by a run that stopped (published or not, nobody knows). Offset 1:
    // claimed just now by a run that is publishing it.
    await db.query(sql`
      INSERT INTO dlq_redrives (dlq_topic, dlq_partition, dlq_offset, source_topic, reason, run_id, state, claimed_at) VALUES
        (${dlq}, 0, 0, ${source}, 'reason a', ${stopped}, 'sending', now() - interval '2 minutes'),
        (${dlq}, 0, 1, ${source}, 'reason b', ${running}, 'sending', now())`);

    const r = await redriveDeadLetters(dlq, { bus, db, logger });
    expect(r).toEqual({
      topic: dlq,
      to: source,
      runId: r.runId,
      dryRun: false,
      total: 3,
      redriven: 2,
      resent: 1,
      alreadyRedriven: 0,
      inFlight: 1,
      notMatching: 0,
      unredrivable: 0,
      failedAgain: 0,
    });
    expect(await redriven(source)).toEqual([
      ['{"v":"a"}', `${dlq}/0/0`],
      ['{"v":"c"}', `${dlq}/0/2`],
    ]);
    const rows = await db.query(sql`SELECT dlq_offset, run_id, state, source_offset, reason FROM dlq_redrives WHERE dlq_topic = ${dlq} ORDER BY dlq_offset`);
    expect(rows).toEqual([
      { dlq_offset: '0', run_id: r.runId, state: 'sent', source_offset: null, reason: 'reason a' },
      { dlq_offset: '1', run_id: running, state: 'sending', source_offset: null, reason: 'reason b' },
      { dlq_offset: '2', run_id: r.runId, state: 'sent', source_offset: '2', reason: 'reason c' },
    ]);
    const listed = await listDeadLetters(bus, db, dlq);
    expect(listed.map((d) => [d.offset, d.redriven?.state ?? null, d.redriven?.runId ?? null])).toEqual([
      ['0', 'sent', r.runId],
      ['1', 'sending', running],
      ['2', 'sent', r.runId],
    ]);

    // Nothing left to send but the running run's record, which stays its own.
    const again = await redriveDeadLetters(dlq, { bus, db, logger });
    expect(again).toMatchObject({ total: 3, redriven: 0, alreadyRedriven: 2, inFlight: 1 });
    expect(await redriven(source)).toHaveLength(2);
  });

  it('releases its claims when the log refuses the records, so the next run sends them', async () => {
    const { source, dlq } = await threeDeadLetters({ createSource: false });
    await expect(redriveDeadLetters(dlq, { bus, db, logger, reasonContains: 'REASON B' })).rejects.toBeInstanceOf(UnknownTopicError);
    expect(await db.query(sql`SELECT dlq_offset FROM dlq_redrives WHERE dlq_topic = ${dlq}`)).toEqual([]);

    await bus.ensureTopics([{ topic: source, partitions: 1 }]);
    const r = await redriveDeadLetters(dlq, { bus, db, logger, reasonContains: 'REASON B' });
    expect(r).toMatchObject({ total: 3, redriven: 1, notMatching: 2, alreadyRedriven: 0 });
    expect(await redriven(source)).toEqual([['{"v":"b"}', `${dlq}/0/1`]]);
  });

  it("never sends a record whose headers do not name the topic's source, and a dry run sends and records nothing", async () => {
    const { source, dlq } = await threeDeadLetters();
    await bus.publish(dlq, [
      { key: 'shop', value: 'typed by hand', headers: {} },
      { key: 'shop', value: 'from elsewhere', headers: { [H.dlqSourceTopic]: 'metrics', [H.dlqReason]: 'reason x' } },
    ]);
    const dry = await redriveDeadLetters(dlq, { bus, db, logger, dryRun: true });
    expect(dry).toMatchObject({ dryRun: true, total: 5, redriven: 3, unredrivable: 2 });
    expect(await redriven(source)).toEqual([]);
    expect(await db.query(sql`SELECT 1 FROM dlq_redrives WHERE dlq_topic = ${dlq}`)).toEqual([]);
    expect(await redriveDeadLetters(dlq, { bus, db, logger })).toMatchObject({ total: 5, redriven: 3, unredrivable: 2 });
    expect((await redriven(source)).map(([v]) => v)).toEqual(['{"v":"a"}', '{"v":"b"}', '{"v":"c"}']);
  });

  it('pages through a topic of more dead letters than one read returns, on every partition', async () => {
    const source = `${uniquePrefix()}events`;
    const dlq = `${source}.dlq`;
    await bus.ensureTopics([
      { topic: source, partitions: 2 },
      { topic: dlq, partitions: 2 },
    ]);
    // One key per partition, 600 records each.
    const keys = [0, 1].map((p) => Array.from({ length: 100 }, (_, i) => `shop-${i}`).find((k) => partitionFor(k, 2) === p)!);
    await bus.publish(
      source,
      Array.from({ length: 1_200 }, (_, i) => ({ key: keys[i % 2], value: String(i) })),
    );
    await sendToDeadLetters(
      bus,
      source,
      (await bus.read(source)).map((record) => ({ record, reason: 'bad' })),
    );
    const held = await bus.offsets(dlq);
    expect(held.every((p) => Number(p.high) > 500)).toBe(true);

    const listed = await listDeadLetters(bus, db, dlq);
    expect(listed.map((d) => `${d.partition}/${d.offset}`)).toEqual(
      held.flatMap((p) => Array.from({ length: Number(p.high) }, (_, o) => `${p.partition}/${o}`)),
    );
    expect(await redriveDeadLetters(dlq, { bus, db, logger })).toMatchObject({ total: 1_200, redriven: 1_200 });
    expect((await redriven(source)).map(([v]) => Number(v)).sort((a, b) => a - b)).toEqual(Array.from({ length: 1_200 }, (_, i) => i));
    expect(await redriveDeadLetters(dlq, { bus, db, logger })).toMatchObject({ total: 1_200, redriven: 0, alreadyRedriven: 1_200 });
  });
});

/**
 * A consumer for which the records redriven to `source` always fail: it dead-letters each copy the last
 * redrive sent, as the projector does with a record that can never succeed.
 */
async function failRedrivenAgain(source: string, seen: Set<string>): Promise<number> {
  const copies = (await bus.read(source)).filter((r) => r.headers[H.redrivenFrom] && !seen.has(r.offset));
  for (const r of copies) seen.add(r.offset);
  await sendToDeadLetters(
    bus,
    source,
    copies.map((record) => ({ record, reason: `still ${record.value.toString()}` })),
  );
  return copies.length;
}

describe('a record that fails again after a redrive', () => {
  it('is one dead letter of its source record: later runs do not send it again unless asked (again), and list counts its redrives', async () => {
    const { source, dlq } = await threeDeadLetters();
    const seen = new Set<string>();
    expect(await redriveDeadLetters(dlq, { bus, db, logger })).toMatchObject({ total: 3, redriven: 3 });
    expect(await failRedrivenAgain(source, seen)).toBe(3);

    for (let run = 2; run <= 3; run++) {
      expect(await redriveDeadLetters(dlq, { bus, db, logger })).toMatchObject({ total: 3, redriven: 0, failedAgain: 3, alreadyRedriven: 0 });
      expect(await failRedrivenAgain(source, seen)).toBe(0);
    }
    // The first dead letters and one copy each that failed again: not one more per run.
    expect((await bus.read(dlq)).length).toBe(6);
    const listed = await listDeadLetters(bus, db, dlq);
    expect(listed.map((d) => [d.sourceOffset, d.offset, d.redrives, d.failedAgain, d.reason])).toEqual([
      ['0', '3', 1, 1, 'still {"v":"a"}'],
      ['1', '4', 1, 1, 'still {"v":"b"}'],
      ['2', '5', 1, 1, 'still {"v":"c"}'],
    ]);

    // Asked: the latest copy of each goes once more, and fails once more.
    const again = await redriveDeadLetters(dlq, { bus, db, logger, again: true, reasonContains: 'still {"v":"b"}' });
    expect(again).toMatchObject({ total: 3, redriven: 1, failedAgain: 0, notMatching: 2 });
    expect((await redriven(source)).slice(3)).toEqual([['{"v":"b"}', `${dlq}/0/4`]]);
    expect(await failRedrivenAgain(source, seen)).toBe(1);
    expect((await listDeadLetters(bus, db, dlq)).map((d) => [d.sourceOffset, d.offset, d.redrives, d.failedAgain])).toEqual([
      ['0', '3', 1, 1],
      ['1', '6', 2, 2],
      ['2', '5', 1, 1],
    ]);
    expect(await redriveDeadLetters(dlq, { bus, db, logger })).toMatchObject({ total: 3, redriven: 0, failedAgain: 3 });
  });
});
