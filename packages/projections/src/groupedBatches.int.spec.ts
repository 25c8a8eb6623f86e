import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connectPostgres, migrate, sql, type Db } from '@shopstream/db';
import { createLogger } from '@shopstream/telemetry';
import { createTestDatabase, testInfra, uniquePrefix, waitFor } from '@shopstream/testkit';
import { createKafkaBus, createPgLogBus, createPlatformaticKafkaBus, topicNames, type Batch, type Bus, type BusRecord } from '@shopstream/bus';
import { applyGroup, CheckpointLost, liveGroupId, runLiveProjection, type ApplyMode, type ProjectionDefinition, type ValidRecord } from './projection.js';

// The batches of several partitions handed over together are applied in one transaction (applyGroup), each
// partition's checkpoint moved with them; a group that cannot commit applies nothing.
const logger = createLogger('grouped-batches', process.env.TEST_LOG_LEVEL ?? 'silent');
let db: Db;
beforeAll(async () => {
  db = connectPostgres({ url: await createTestDatabase(testInfra().databaseUrl), poolSize: 4 });
  await migrate(db);
  await db.query(sql`CREATE TABLE probe_applied (topic text NOT NULL, n integer NOT NULL, PRIMARY KEY (topic, n))`);
}, 120_000);
afterAll(async () => {
  await db?.close();
});

type Probe = { n: number };
/** A projection that inserts each n and notes the partitions of each apply call. */
function probe(topic: string, applies: number[][]): ProjectionDefinition<Probe> {
  return {
    name: 'probe',
    version: 1,
    summary: 'records each n',
    source: () => topic,
    emits: () => [],
    schema: z.object({ n: z.number().int() }),
    tables: ['probe_applied'],
    open: async () => ({
      async apply(tx, records) {
        applies.push([...new Set(records.map((r) => r.record.partition))].sort((a, b) => a - b));
        await tx.query(sql`INSERT INTO probe_applied (topic, n) SELECT ${topic}, unnest(${records.map((r) => r.value.n)}::int[])`);
        return [];
      },
    }),
  };
}
const applied = async (topic: string) => (await db.query(sql`SELECT n FROM probe_applied WHERE topic = ${topic} ORDER BY n`)).map((r) => Number(r.n));
const checkpoints = async (group: string, topic: string) =>
  Object.fromEntries(
    (await db.query(sql`SELECT partition, next_offset FROM projection_offsets WHERE group_id = ${group} AND topic = ${topic} ORDER BY partition`)).map((r) => [
      Number(r.partition),
      Number(r.next_offset),
    ]),
  );

describe('applyGroup (the batches of several partitions in one transaction)', () => {
  const topic = 'grouped-direct';
  const group = 'grouped-direct-group';
  const mode: ApplyMode = { checkpointGroup: group, emit: false, reject: async () => {} };
  const record = (partition: number, offset: number, n: number): ValidRecord<Probe> => ({
    record: { topic, partition, offset: String(offset), key: 'k', value: Buffer.from(JSON.stringify({ n })), headers: {}, timestamp: 0 } satisfies BusRecord,
    value: { n },
  });
  const item = (partition: number, from: number, ns: number[], expectedFrom?: bigint) => {
    const valid = ns.map((n, i) => record(partition, from + i, n));
    const batch: Batch = { topic, partition, records: valid.map((v) => v.record) };
    return { batch, valid, ...(expectedFrom === undefined ? {} : { expectedFrom }) };
  };

  it('applies every partition once, moves each checkpoint, and skips what a checkpoint says is applied', async () => {
    const applies: number[][] = [];
    const def = probe(topic, applies);
    const logic = await def.open({ db, logger, topics: topicNames('') });
    const first = await applyGroup(logic, db, mode, [item(0, 0, [1, 2]), item(3, 0, [30]), item(1, 0, [10, 11, 12])]);
    expect(first.map((o) => [o.applied, o.duplicates])).toEqual([
      [2, 0],
      [1, 0],
      [3, 0],
    ]);
    expect(applies).toEqual([[0, 1, 3]]);
    expect(await checkpoints(group, topic)).toEqual({ 0: 2, 1: 3, 3: 1 });

    // Delivered again from offset 1 of partition 0 with a new record, and partition 1 again whole: only new records apply.
    const again = await applyGroup(logic, db, mode, [item(0, 1, [2, 3]), item(1, 0, [10, 11, 12])]);
    expect(again.map((o) => [o.applied, o.duplicates])).toEqual([
      [1, 1],
      [0, 3],
    ]);
    expect(await applied(topic)).toEqual([1, 2, 3, 10, 11, 12, 30]);
    expect(await checkpoints(group, topic)).toEqual({ 0: 3, 1: 3, 3: 1 });
  }, 60_000);

  it('applies nothing when one partition finds its checkpoint behind where this process moved it (CheckpointLost)', async () => {
    const applies: number[][] = [];
    const def = probe(`${topic}-lost`, applies);
    const logic = await def.open({ db, logger, topics: topicNames('') });
    const lost = applyGroup(logic, db, { ...mode, checkpointGroup: `${group}-lost` }, [item(0, 0, [1]), item(1, 5, [2], 9n)]);
    await expect(lost).rejects.toBeInstanceOf(CheckpointLost);
    await expect(lost).rejects.toMatchObject({ partition: 1, checkpoint: -1n, expected: 9n });
    expect(await applied(`${topic}-lost`)).toEqual([]);
    expect(await checkpoints(`${group}-lost`, topic)).toEqual({});
  }, 60_000);
});

const kafka = (create: typeof createPlatformaticKafkaBus) => () =>
  create({ brokers: testInfra().kafkaBrokers, clientId: 'grouped-batches', replicationFactor: 1, logger });
// The Postgres-log bus of the embedded mode hands over the partitions of one round together too (on a PostgreSQL
// server; on PGlite, one connection, one at a time).
const adapters: [string, () => Promise<Bus>][] = [
  ['@platformatic/kafka', kafka(createPlatformaticKafkaBus)],
  ['kafkajs', kafka(createKafkaBus)],
  ['the Postgres-log bus', () => createPgLogBus({ db, logger, trimIntervalMs: 0 })],
];

describe.each(adapters)('a live projection on %s', (name, createBus) => {
  const prefix = uniquePrefix();
  const topic = `${prefix}grouped`;
  let bus: Bus;
  beforeAll(async () => {
    bus = await createBus();
    await bus.ensureTopics([
      { topic, partitions: 6 },
      { topic: `${topic}.dlq`, partitions: 1 },
    ]);
  }, 120_000);
  afterAll(async () => {
    await bus?.close();
  });

  it(`applies the records of several partitions fetched together in one transaction, each once (${name})`, async () => {
    const applies: number[][] = [];
    const def = probe(topic, applies);
    const projection = await runLiveProjection(def, { bus, db, logger, topics: topicNames(''), groupPrefix: prefix, lagIntervalMs: 0 });
    let sent = 0;
    try {
      // Rounds of one publish of records under 24 keys (every partition), until an apply took several partitions:
      // the records of one publish come in one fetch answer, whose partitions are handed over together.
      for (let round = 0; round < 20 && !applies.some((a) => a.length > 1); round++) {
        const records = Array.from({ length: 48 }, (_, i) => ({ key: `shop-${i % 24}`, value: JSON.stringify({ n: sent + i }), headers: {} }));
        await bus.publish(topic, records);
        sent += records.length;
        await waitFor(async () => (await applied(topic)).length === sent, { timeoutMs: 60_000, message: `round ${round} applied` });
      }
      expect(applies.some((a) => a.length > 1)).toBe(true);
      expect(await applied(topic)).toEqual(Array.from({ length: sent }, (_, i) => i));
      // Each partition's checkpoint is its log end.
      const ends = Object.fromEntries((await bus.offsets(topic)).map((p) => [p.partition, Number(p.high)]));
      expect(await checkpoints(liveGroupId(prefix, def), topic)).toEqual(Object.fromEntries(Object.entries(ends).filter(([, high]) => high > 0)));
      expect(await bus.read(`${topic}.dlq`)).toEqual([]);
      expect(projection.applied).toBe(sent);
    } finally {
      await projection.stop();
    }
  }, 240_000);
});
