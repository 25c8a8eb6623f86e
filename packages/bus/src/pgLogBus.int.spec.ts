import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connectPostgres, migrate, openPglite, sql, type Db } from '@shopstream/db';
import { createLogger } from '@shopstream/telemetry';
import { createTestDatabase, testInfra, uniquePrefix } from '@shopstream/testkit';
import { waitFor } from '@shopstream/testkit';
import { BusUnavailableError, type Batch, type Bus, type Subscription } from './port.js';
import { createPgLogBus, UnsupportedTopicConfigError, type PgLogBusOptions } from './pglog/pgLogBus.js';
import { trimExpiredRecords } from './pglog/trimRecords.js';
import { UnknownTopicError } from './pglog/appendRecords.js';
import { partitionFor } from './pglog/partitionFor.js';

// What only the Postgres log has: topics stored in tables, leases between members of a group, NOTIFY.
// The port's behaviour itself is tested once, in the conformance suite.
const logger = createLogger('pglog-test', process.env.TEST_LOG_LEVEL ?? 'silent');

const backends: [string, () => Promise<Db>][] = [
  ['PGlite', () => openPglite(undefined)],
  ['PostgreSQL', async () => connectPostgres({ url: await createTestDatabase(testInfra().databaseUrl), poolSize: 5 })],
];

describe.each(backends)('Postgres log on %s', (_name, open) => {
  let db: Db;
  const prefix = uniquePrefix();
  const buses: Bus[] = [];
  const subs: Subscription[] = [];
  const newBus = async (o: Partial<PgLogBusOptions> = {}) => {
    const b = await createPgLogBus({ db, logger, pollIntervalMs: 200, ...o });
    buses.push(b);
    return b;
  };
  const collect = async (b: Bus, groupId: string, topic: string, handle: (batch: Batch) => Promise<void> = async () => {}) => {
    const batches: Batch[] = [];
    const sub = await b.consume({
      groupId,
      topics: [topic],
      handleBatch: async (batch) => {
        await handle(batch);
        batches.push(batch);
      },
    });
    subs.push(sub);
    return { batches, records: () => batches.flatMap((x) => x.records), sub };
  };

  beforeAll(async () => {
    db = await open();
    await migrate(db);
  });
  afterEach(async () => {
    await Promise.all(subs.splice(0).map((s) => s.stop()));
  });
  afterAll(async () => {
    await Promise.all(buses.map((b) => b.close()));
    await db?.close();
  });

  it('stores topics with their partitions once, and refuses unknown topics clearly', async () => {
    const b = await newBus();
    const t = `${prefix}stored`;
    await b.ensureTopics([{ topic: t, partitions: 4 }]);
    await b.ensureTopics([{ topic: t, partitions: 9 }]);
    expect(await db.query(sql`SELECT topic, partitions FROM bus_topics WHERE topic = ${t}`)).toEqual([{ topic: t, partitions: 4 }]);
    expect(await db.query(sql`SELECT partition, next_offset FROM bus_partitions WHERE topic = ${t} ORDER BY partition`)).toEqual(
      [0, 1, 2, 3].map((partition) => ({ partition, next_offset: '0' })),
    );

    const missing = `${prefix}never-created`;
    const err = await b.publish(missing, [{ key: 'k', value: 'v' }]).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UnknownTopicError);
    expect(err).not.toBeInstanceOf(BusUnavailableError);
    expect((err as Error).message).toBe(`Unknown topic "${missing}" on the Postgres-log bus: create it with ensureTopics first`);
    await expect(b.consume({ groupId: 'g', topics: [missing], handleBatch: async () => {} })).rejects.toBeInstanceOf(UnknownTopicError);
  });

  it("takes a large publish whole: dense offsets, a round's batches of at most 500 records together", async () => {
    const b = await newBus();
    const t = `${prefix}large`;
    await b.ensureTopics([{ topic: t, partitions: 2 }]);
    const records = Array.from({ length: 2_500 }, (_, i) => ({ key: `shop-${i % 7}`, value: String(i) }));
    await b.publish(t, records);
    const c = await collect(b, `g-${randomUUID()}`, t);
    await waitFor(() => c.records().length >= records.length, { timeoutMs: 120_000, message: 'all 2500 records' });
    expect(c.records()).toHaveLength(2_500);
    // Both partitions hold records from the first round on: each round's 500 (batchSize) are shared between them.
    expect(Math.max(...c.batches.map((x) => x.records.length))).toBe(250);
    for (const partition of [0, 1]) {
      const mine = records.filter((r) => partitionFor(r.key, 2) === partition);
      const got = c.records().filter((r) => r.partition === partition);
      expect(got.map((r) => r.offset)).toEqual(mine.map((_, i) => String(i)));
      expect(got.map((r) => r.value.toString())).toEqual(mine.map((r) => r.value));
    }
  });

  it('wakes an idle consumer by NOTIFY, not by its poll', async () => {
    const b = await newBus({ pollIntervalMs: 600_000 });
    const t = `${prefix}notify`;
    await b.ensureTopics([{ topic: t, partitions: 1 }]);
    const g = `g-${randomUUID()}`;
    const c = await collect(b, g, t);
    await b.publish(t, [{ key: 'k', value: 'one' }]);
    await waitFor(async () => (await b.lag(g, [t]))[0].lag === 0 && c.records().length === 1, { message: 'first record committed' });
    await b.publish(t, [{ key: 'k', value: 'two' }]);
    await waitFor(() => c.records().length === 2, { timeoutMs: 120_000, message: 'second record, woken by NOTIFY (the poll would take 600 s)' });
    expect(c.records().map((r) => [r.offset, r.value.toString()])).toEqual([
      ['0', 'one'],
      ['1', 'two'],
    ]);
  });

  it('gathers records fewer than fetchMinRecords: three appends one after the other come as one batch', async () => {
    // No wait ends it: the poll and fetchMaxWaitMs are ten minutes, so only the third record's arrival can.
    const b = await newBus({ pollIntervalMs: 600_000, fetchMinRecords: 3, fetchMaxWaitMs: 600_000 });
    const t = `${prefix}gather`;
    await b.ensureTopics([{ topic: t, partitions: 1 }]);
    const c = await collect(b, `g-${randomUUID()}`, t);
    for (const value of ['a', 'b', 'c']) await b.publish(t, [{ key: 'k', value }]);
    await waitFor(() => c.records().length === 3, { timeoutMs: 120_000, message: 'the three records' });
    expect(c.batches.map((x) => x.records.map((r) => r.value.toString()))).toEqual([['a', 'b', 'c']]);
  });

  it('delivers records fewer than fetchMinRecords once the first of them waited fetchMaxWaitMs', async () => {
    const b = await newBus({ pollIntervalMs: 600_000, fetchMinRecords: 100, fetchMaxWaitMs: 200 });
    const t = `${prefix}gather-wait`;
    await b.ensureTopics([{ topic: t, partitions: 1 }]);
    const c = await collect(b, `g-${randomUUID()}`, t);
    await b.publish(t, [{ key: 'k', value: 'alone' }]);
    await waitFor(() => c.records().length === 1, { timeoutMs: 120_000, message: 'the record, after the wait' });
    expect(c.batches.map((x) => x.records.map((r) => r.value.toString()))).toEqual([['alone']]);
  });

  it('lets one member of a group hold a partition at a time; another takes over from the committed position', async () => {
    const t = `${prefix}members`;
    const g = `g-${randomUUID()}`;
    const first = await newBus();
    await first.ensureTopics([{ topic: t, partitions: 2 }]);
    const m1 = await collect(first, g, t);
    await waitFor(async () => (await db.query(sql`SELECT count(*)::int AS n FROM bus_group_offsets WHERE group_id = ${g} AND owner IS NOT NULL`))[0].n === 2, {
      message: 'first member holds both partitions',
    });
    const m2 = await collect(await newBus(), g, t);
    const before = ['a', 'b', 'c', 'd'].map((k) => ({ key: k, value: `before-${k}` }));
    await first.publish(t, before);
    await waitFor(async () => m1.records().length === 4 && (await first.lag(g, [t])).every((l) => l.lag === 0), { message: 'first member committed all' });
    expect(m2.records()).toEqual([]);
    const owners = await db.query(sql`SELECT DISTINCT owner FROM bus_group_offsets WHERE group_id = ${g}`);
    expect(owners).toHaveLength(1);

    await m1.sub.stop();
    subs.splice(subs.indexOf(m1.sub), 1);
    const after = ['a', 'b', 'c', 'd'].map((k) => ({ key: k, value: `after-${k}` }));
    await first.publish(t, after);
    await waitFor(() => m2.records().length >= 4, { message: 'second member takes over' });
    expect(
      m2
        .records()
        .map((r) => r.value.toString())
        .sort(),
    ).toEqual(after.map((r) => r.value).sort());
    expect(
      m1
        .records()
        .map((r) => r.value.toString())
        .sort(),
    ).toEqual(before.map((r) => r.value).sort());
  });

  it('hands a partition whose lease ran out to another member, which redelivers from the committed position', async () => {
    const t = `${prefix}lease`;
    const g = `g-${randomUUID()}`;
    const b1 = await newBus({ leaseMs: 500 });
    await b1.ensureTopics([{ topic: t, partitions: 1 }]);
    await b1.publish(t, [{ key: 'k', value: 'x' }]);
    let release!: () => void;
    const stuck = new Promise<void>((r) => (release = r));
    let entered = false;
    const m1 = await collect(b1, g, t, async () => {
      entered = true;
      await stuck;
    });
    await waitFor(() => entered, { message: 'first member handling' });
    const m2 = await collect(await newBus({ leaseMs: 500 }), g, t);
    await waitFor(() => m2.records().length === 1, { message: 'second member got the record after the lease ran out' });
    release();
    await waitFor(async () => (await b1.lag(g, [t]))[0].lag === 0, { message: 'committed' });
    expect(m2.records().map((r) => [r.offset, r.value.toString()])).toEqual([['0', 'x']]);
    // The stuck member's late commit was refused: it lost the lease, the other member's commit stands.
    expect(m1.batches.map((x) => x.records[0].offset)).toEqual(['0']);
    const rows = await db.query(sql`SELECT next_offset FROM bus_group_offsets WHERE group_id = ${g}`);
    expect(rows).toEqual([{ next_offset: '1' }]);
  });

  it("trims a derived topic's records past its retention, a prefix at a time, and never a kept topic's", async () => {
    const b = await newBus({ trimIntervalMs: 0 });
    const derived = `${prefix}trim-derived`;
    const source = `${prefix}trim-source`;
    await b.ensureTopics([
      { topic: derived, partitions: 1, config: { 'retention.ms': String(30 * 86_400_000), 'retention.bytes': '-1' } },
      { topic: source, partitions: 1, config: { 'retention.ms': '-1', 'retention.bytes': '-1' } },
    ]);
    const ten = Array.from({ length: 10 }, (_, i) => ({ key: 'shop', value: `v${i}` }));
    await b.publish(derived, ten);
    await b.publish(source, ten);
    // Records 0-5 and 8 of both topics are 40 days old; 6, 7 and 9 are new.
    await db.query(sql`
      UPDATE bus_records SET created_at = now() - interval '40 days'
      WHERE topic IN (${derived}, ${source}) AND ("offset" < 6 OR "offset" = 8)`);

    const trimmed = (await trimExpiredRecords(db, { batchSize: 4 })).filter((t) => t.topic === derived || t.topic === source);
    expect(trimmed).toEqual([{ topic: derived, partition: 0, deleted: 6 }]);
    const held = async (t: string) => (await db.query(sql`SELECT "offset" FROM bus_records WHERE topic = ${t} ORDER BY "offset"`)).map((r) => Number(r.offset));
    // 8 is old but follows a young record: like Kafka's segments, only a prefix goes, so offsets stay dense.
    expect(await held(derived)).toEqual([6, 7, 8, 9]);
    expect(await held(source)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(await b.offsets(derived)).toEqual([{ partition: 0, low: '6', high: '10' }]);
    expect(await b.offsets(source)).toEqual([{ partition: 0, low: '0', high: '10' }]);

    // A new group starts at the first record held, and its lag counts only what is there.
    const g = `g-${randomUUID()}`;
    expect(await b.lag(g, [derived])).toEqual([{ topic: derived, partition: 0, lag: 4 }]);
    const c = await collect(b, g, derived);
    await waitFor(() => c.records().length === 4, { message: 'the four records held' });
    expect(c.records().map((r) => [r.offset, r.value.toString()])).toEqual([6, 7, 8, 9].map((o) => [String(o), `v${o}`]));
    expect((await trimExpiredRecords(db)).filter((t) => t.topic === derived || t.topic === source)).toEqual([]);
  });

  it('trims on its own, every trimIntervalMs, once the topic is aligned to a finite retention', async () => {
    const b = await newBus({ trimIntervalMs: 50 });
    const t = `${prefix}trim-timer`;
    await b.ensureTopics([{ topic: t, partitions: 1 }]);
    await b.publish(t, [
      { key: 'k', value: 'old' },
      { key: 'k', value: 'new' },
    ]);
    await db.query(sql`UPDATE bus_records SET created_at = now() - interval '2 days' WHERE topic = ${t} AND "offset" = 0`);
    expect(await b.alignTopicConfigs([{ topic: t, partitions: 1, config: { 'retention.ms': '86400000' } }])).toEqual([
      { topic: t, name: 'retention.ms', from: '-1', inherited: false, to: '86400000' },
    ]);
    await waitFor(async () => (await b.offsets(t))[0].low === '1', { message: 'the old record trimmed by the timer' });
    expect(await b.offsets(t)).toEqual([{ partition: 0, low: '1', high: '2' }]);
  });

  it('refuses settings it cannot honour, naming them', async () => {
    const b = await newBus();
    const t = `${prefix}unsupported`;
    const refused: Record<string, string>[] = [{ 'retention.bytes': '1073741824' }, { 'retention.ms': '0' }, { 'cleanup.policy': 'compact' }];
    for (const config of refused) {
      const err = await b.ensureTopics([{ topic: t, partitions: 1, config }]).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(UnsupportedTopicConfigError);
      expect((err as Error).message).toContain(`${Object.keys(config)[0]}=${Object.values(config)[0]}`);
    }
    expect(await db.query(sql`SELECT topic FROM bus_topics WHERE topic = ${t}`)).toEqual([]);
  });
});
