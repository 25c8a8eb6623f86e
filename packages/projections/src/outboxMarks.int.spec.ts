import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectPostgres, migrate, queryRows, sql, type Db, type Queryable } from '@shopstream/db';
import { createLogger } from '@shopstream/telemetry';
import { createTestDatabase, testInfra, uniquePrefix } from '@shopstream/testkit';
import { createPlatformaticKafkaBus, type Bus, type OutgoingRecord } from '@shopstream/bus';
import { appendMarked, appendToOutbox, HeldRecords, relayOutbox, type EmittedRecord } from './outbox.js';

const logger = createLogger('outbox-marks', process.env.TEST_LOG_LEVEL ?? 'silent');
const prefix = uniquePrefix();
let db: Db;
let bus: Bus;

beforeAll(async () => {
  db = connectPostgres({ url: await createTestDatabase(testInfra().databaseUrl), poolSize: 3 });
  await migrate(db);
  bus = await createPlatformaticKafkaBus({ brokers: testInfra().kafkaBrokers, clientId: 'outbox-marks', replicationFactor: 1, logger });
}, 120_000);
afterAll(async () => {
  await bus?.close();
  await db?.close();
});

/** The record a projection would emit for n, with n as its ref. */
const recordOf = (n: number): OutgoingRecord => ({ key: 'shop-1', value: JSON.stringify({ n }), headers: { schema: 'test.v1', n: String(n) } });
const emitted = (topic: string, from: number, count: number): EmittedRecord[] =>
  Array.from({ length: count }, (_, i) => ({ topic, ref: String(from + i), ...recordOf(from + i) }));
/** How the test projection rebuilds its records from their refs: the same records, and none for refs it lost (listed). */
const recoverer = (lost: Set<string> = new Set()) => ({
  test: async (_q: Queryable, refs: string[]) => refs.filter((r) => !lost.has(r)).map((r) => recordOf(Number(r))),
});

const outboxRows = (topic: string) =>
  queryRows(db, sql`SELECT mark, records FROM outbox WHERE topic = ${topic} ORDER BY seq`, (r) => ({ mark: r.mark, records: Number(r.records) }));

/** The topic's records as published: their n, key and n header, in log order (one partition: one key). */
async function published(topic: string) {
  return (await bus.read(topic)).map((r) => ({ n: JSON.parse(r.value.toString()).n as number, key: r.key, header: r.headers.n, from: r.headers.from }));
}
const upTo = (n: number) => Array.from({ length: n }, (_, i) => i);
/** A topic of one partition for one test. */
async function freshTopic(name: string): Promise<string> {
  const topic = `${prefix}${name}`;
  await bus.ensureTopics([{ topic, partitions: 1 }]);
  return topic;
}

describe('outbox mark rows (a live projector batch: one row of refs, its records held in memory)', () => {
  it('writes one row of refs per batch and topic, relays the held records from memory, and deletes the row', async () => {
    const topic = await freshTopic('marks-held');
    const held = new HeldRecords();
    // Marked as held, to see that the relay publishes what it holds and does not rebuild the records.
    const mark = (records: OutgoingRecord[]) => records.map((r) => ({ ...r, headers: { ...r.headers, from: 'memory' } }));
    await db.tx((tx) => appendMarked(tx, emitted(topic, 0, 300), 'test', (t, seq, records) => t === topic && held.hold(seq, mark(records))));
    expect(await outboxRows(topic)).toEqual([{ mark: 'test', records: 300 }]);
    const [row] = await db.query(sql`SELECT key, value FROM outbox WHERE topic = ${topic}`);
    expect(row).toEqual({ key: '', value: upTo(300).join('\n') });

    expect(await relayOutbox({ db, bus, topic, held, recover: recoverer() })).toBe(300);
    const out = await published(topic);
    expect(out.map((r) => r.n)).toEqual(upTo(300));
    expect(out.every((r) => r.key === 'shop-1' && r.header === String(r.n) && r.from === 'memory')).toBe(true);
    expect(await outboxRows(topic)).toEqual([]);
    expect(held.size).toBe(0);
  }, 60_000);

  it('rebuilds a mark row no process holds (left by a crash) by its projection, in seq order with plain rows around it, leaving out what is gone', async () => {
    const topic = await freshTopic('marks-crash');
    await db.tx((tx) => appendToOutbox(tx, emitted(topic, 0, 2)));
    // Held by a process that then died: nothing holds it now.
    await db.tx((tx) => appendMarked(tx, emitted(topic, 2, 50), 'test', () => {}));
    await db.tx((tx) => appendToOutbox(tx, emitted(topic, 52, 1)));
    expect(await outboxRows(topic)).toEqual([
      { mark: null, records: 1 },
      { mark: null, records: 1 },
      { mark: 'test', records: 50 },
      { mark: null, records: 1 },
    ]);

    // A relay that cannot rebuild the mark (another kind of process) stops before it.
    expect(await relayOutbox({ db, bus, topic })).toBe(2);
    expect((await outboxRows(topic)).length).toBe(2);

    // Rounds of 10 records; the projection lost the record of ref 7 (its row erased).
    expect(await relayOutbox({ db, bus, topic, batchSize: 10, held: new HeldRecords(), recover: recoverer(new Set(['7'])) })).toBe(50);
    const out = await published(topic);
    expect(out.map((r) => r.n)).toEqual(upTo(53).filter((n) => n !== 7));
    expect(out.every((r) => r.key === 'shop-1' && r.header === String(r.n))).toBe(true);
    expect(await outboxRows(topic)).toEqual([]);
  }, 60_000);

  it('sends a held row larger than the round in parts (a probe is one record), deleting the row once all of it went out', async () => {
    const topic = await freshTopic('marks-parts');
    const held = new HeldRecords();
    await db.tx((tx) => appendMarked(tx, emitted(topic, 0, 25), 'test', (_t, seq, records) => held.hold(seq, records)));
    await db.tx((tx) => appendToOutbox(tx, emitted(topic, 25, 1)));

    expect(await relayOutbox({ db, bus, topic, batchSize: 10, held, recover: recoverer() })).toBe(26);
    expect((await published(topic)).map((r) => r.n)).toEqual(upTo(26));
    expect(await outboxRows(topic)).toEqual([]);
    expect(held.size).toBe(0);
  }, 60_000);

  it('never sends twice what a relay of another process sent: an entry held for a row already relayed is dropped', async () => {
    const topic = await freshTopic('marks-replica');
    const held = new HeldRecords();
    const hold = (_t: string, seq: string, records: OutgoingRecord[]) => held.hold(seq, records);
    await db.tx((tx) => appendMarked(tx, emitted(topic, 0, 5), 'test', hold));
    // Another replica's relay (no memory of these records) takes the row first.
    expect(await relayOutbox({ db, bus, topic, recover: recoverer() })).toBe(5);
    await db.tx((tx) => appendMarked(tx, emitted(topic, 5, 5), 'test', hold));
    expect(held.size).toBe(2);
    expect(await relayOutbox({ db, bus, topic, held, recover: recoverer() })).toBe(5);
    expect(held.size).toBe(0);
    expect((await published(topic)).map((r) => r.n)).toEqual(upTo(10));
  }, 60_000);

  it('writes a batch with a record without a ref as rows, which relay as before', async () => {
    const topic = await freshTopic('marks-noref');
    const records = [...emitted(topic, 0, 2), { topic, ...recordOf(2) }];
    const held = new HeldRecords();
    await db.tx((tx) => appendMarked(tx, records, 'test', (_t, seq, r) => held.hold(seq, r)));
    expect(await outboxRows(topic)).toEqual([
      { mark: null, records: 1 },
      { mark: null, records: 1 },
      { mark: null, records: 1 },
    ]);
    expect(held.size).toBe(0);
    expect(await relayOutbox({ db, bus, topic, held })).toBe(3);
    expect((await published(topic)).map((r) => r.n)).toEqual(upTo(3));
  }, 60_000);
});
