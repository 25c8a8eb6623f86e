import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { connectPostgres, migrate, queryRow, sql, type Db } from '@shopstream/db';
import { createKafkaBus, createPlatformaticKafkaBus, topicNames, type Bus } from '@shopstream/bus';
import { liveGroupId, runLiveProjection, type ProjectionDefinition } from '@shopstream/projections';
import { createLogger, registry } from '@shopstream/telemetry';
import { createTestDatabase, testInfra, uniquePrefix, waitFor } from '@shopstream/testkit';

// PostgreSQL restored from a backup (or failed over to a replica that lagged) has lost work the consumer group had
// already committed in Kafka: the projection's checkpoint and rows are behind the group's position. A projection
// that resumed at the group's position would skip the records between for good; it must apply them again.
const adapters: [string, (o: Parameters<typeof createKafkaBus>[0]) => Promise<Bus>][] = [
  ['@platformatic/kafka', createPlatformaticKafkaBus],
  ['kafkajs', createKafkaBus],
];

describe.each(adapters)('a projection whose PostgreSQL lost committed work (%s)', (_name, createBus) => {
  const prefix = uniquePrefix();
  const topic = `${prefix}probe`;
  const logger = createLogger('projection-restore', process.env.TEST_LOG_LEVEL ?? 'silent');
  let db: Db;
  let bus: Bus;
  const def: ProjectionDefinition<{ n: number }> = {
    name: 'probe',
    version: 1,
    summary: 'records each n it is given',
    source: () => topic,
    emits: () => [],
    schema: z.object({ n: z.number().int() }),
    tables: ['probe_applied'],
    open: async () => ({
      async apply(tx, records) {
        for (const { value } of records) await tx.query(sql`INSERT INTO probe_applied VALUES (${value.n}) ON CONFLICT DO NOTHING`);
        return [];
      },
    }),
  };
  const group = liveGroupId(prefix, def);
  const run = () => runLiveProjection(def, { bus, db, logger, topics: topicNames(''), groupPrefix: prefix, lagIntervalMs: 0 });
  const send = (n: number) => bus.publish(topic, [{ key: 'shop', value: JSON.stringify({ n }), headers: {} }]);
  const applied = async () => (await db.query(sql`SELECT n FROM probe_applied ORDER BY n`)).map((r) => Number(r.n));
  const checkpoint = () =>
    queryRow(db, sql`SELECT next_offset FROM projection_offsets WHERE group_id = ${group} AND topic = ${topic} AND partition = 0`, (r) =>
      String(r.next_offset),
    );
  /** Kafka's admin client, for the group's committed position and to delete records as retention does. */
  let admin: Admin;
  /** The group's committed position in Kafka. */
  const committed = async () => {
    const [t] = await admin.fetchOffsets({ groupId: group, topics: [topic] });
    return t?.partitions.find((p) => p.partition === 0)?.offset;
  };
  /** Runs the projection until `n` is applied and the group's position in Kafka is committed past it. */
  const runUntil = async (n: number) => {
    const p = await run();
    try {
      await waitFor(async () => (await applied()).includes(n), { timeoutMs: 60_000, message: `record ${n} applied` });
      // The group's committed position in Kafka reaches the checkpoint (lag alone would not: a transaction marker
      // at the log's end is never consumed).
      await waitFor(async () => (await committed()) === (await checkpoint()), { timeoutMs: 60_000, message: 'the group committed' });
    } finally {
      await p.stop();
    }
  };
  /** shopstream_projection_checkpoint_behind_total of this projection, by outcome. */
  const behind = async () => {
    const m = await registry.getSingleMetric('shopstream_projection_checkpoint_behind_total')!.get();
    return Object.fromEntries(m.values.filter((v) => v.labels.group === group).map((v) => [v.labels.outcome, v.value]));
  };
  /** What a restore leaves: the rows and the checkpoint as they were once records 1..n (offsets 0..n-1) were applied. */
  const restoreTo = async (n: number) => {
    await db.query(sql`DELETE FROM probe_applied WHERE n > ${n}`);
    await db.query(sql`UPDATE projection_offsets SET next_offset = ${n} WHERE group_id = ${group} AND topic = ${topic}`);
  };

  beforeAll(async () => {
    db = connectPostgres({ url: await createTestDatabase(testInfra().databaseUrl), poolSize: 2 });
    await migrate(db);
    await db.query(sql`CREATE TABLE probe_applied (n integer PRIMARY KEY)`);
    admin = new Kafka({ brokers: testInfra().kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    bus = await createBus({ brokers: testInfra().kafkaBrokers, clientId: 'projection-restore', replicationFactor: 1, logger });
    await bus.ensureTopics([
      { topic, partitions: 1 },
      { topic: `${topic}.dlq`, partitions: 1 },
    ]);
  }, 120_000);
  afterAll(async () => {
    await admin?.disconnect();
    await bus?.close();
    await db?.close();
  });

  it('applies again, from its checkpoint, the records the group had committed past it', async () => {
    for (let n = 1; n <= 5; n++) await send(n);
    await runUntil(5);
    expect(await checkpoint()).toBe('5');

    // Restored to a backup taken after record 2: the group's position in Kafka is still 5.
    await restoreTo(2);
    await send(6);
    await runUntil(6);
    expect(await applied()).toEqual([1, 2, 3, 4, 5, 6]);
    expect(await checkpoint()).toBe('6');
    expect(await behind()).toEqual({ rewound: 1 });
    expect(await bus.read(`${topic}.dlq`)).toEqual([]);
  }, 240_000);

  it('goes on from the first record the log still holds when retention removed the records after its checkpoint', async () => {
    // Restored to a backup taken after record 1, and the log no longer holds offsets 0-2 (records 1-3).
    await restoreTo(1);
    await admin.fetchTopicMetadata({ topics: [topic] });
    await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '3' }] });
    await send(7);
    await runUntil(7);
    // Records 2 and 3 are gone from the log; 4-6, which the restore also lost, are applied again.
    expect(await applied()).toEqual([1, 4, 5, 6, 7]);
    expect(await checkpoint()).toBe('7');
    expect(await behind()).toEqual({ rewound: 2, gone: 1 });
  }, 240_000);

  it("asks for nothing again when its checkpoint sits on another producer's transaction marker", async () => {
    // An upstream producer writing in Kafka transactions: each commit marker takes an offset and is no record, so
    // a checkpoint after a transaction's last record is the marker's offset, below the next record's.
    const kafka = new Kafka({ brokers: testInfra().kafkaBrokers, logLevel: logLevel.NOTHING });
    const producer = kafka.producer({ transactionalId: `${prefix}tx`, idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    const inTransaction = async (...ns: number[]) => {
      const tx = await producer.transaction();
      await tx.send({ topic, messages: ns.map((n) => ({ key: 'shop', value: JSON.stringify({ n }) })) });
      await tx.commit();
    };
    try {
      await inTransaction(8, 9);
      await runUntil(9);
      const at = await checkpoint();
      await inTransaction(10);
      await runUntil(10);
      // The batch started past the checkpoint (the marker between), and went through as it came.
      expect(Number(await checkpoint())).toBeGreaterThan(Number(at) + 1);
      expect(await applied()).toEqual([1, 4, 5, 6, 7, 8, 9, 10]);
      expect(await behind()).toEqual({ rewound: 2, gone: 1 });
    } finally {
      await producer.disconnect();
    }
  }, 240_000);

  it('applies again, while it runs, the batches PostgreSQL lost after committing them (a failover to a replica that lagged)', async () => {
    const p = await run();
    try {
      const base = await checkpoint();
      await send(11);
      await waitFor(async () => (await applied()).includes(11), { timeoutMs: 60_000, message: 'record 11 applied' });
      await send(12);
      await waitFor(async () => (await applied()).includes(12), { timeoutMs: 60_000, message: 'record 12 applied' });
      // PostgreSQL failed over to a replica that lacked the last two batches: their rows and the checkpoint are as
      // before them, while the running consumer's place in the log is past them.
      await db.query(sql`DELETE FROM probe_applied WHERE n > 10`);
      await db.query(sql`UPDATE projection_offsets SET next_offset = ${base} WHERE group_id = ${group} AND topic = ${topic}`);
      await send(13);
      await waitFor(async () => (await applied()).includes(13), { timeoutMs: 60_000, message: 'record 13 applied' });
      // Found behind where this process had moved it: 11 and 12 delivered again, not skipped.
      expect(await applied()).toEqual([1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
      expect(await behind()).toEqual({ rewound: 3, gone: 1 });
    } finally {
      await p.stop();
    }
  }, 240_000);

  it('sends a record that fails the schema to the dead letters once when its batch finds the checkpoint behind and the records between gone', async () => {
    const p = await run();
    try {
      const base = await checkpoint();
      await send(14);
      await waitFor(async () => (await applied()).includes(14), { timeoutMs: 60_000, message: 'record 14 applied' });
      // A failover lost the last batch, and retention has removed every record the log held: the next batch finds
      // the checkpoint behind where this process moved it, with nothing to deliver again, and is applied as it came.
      const end = (await bus.offsets(topic)).find((o) => o.partition === 0)!.high;
      await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: end }] });
      await db.query(sql`DELETE FROM probe_applied WHERE n > 13`);
      await db.query(sql`UPDATE projection_offsets SET next_offset = ${base} WHERE group_id = ${group} AND topic = ${topic}`);
      await bus.publish(topic, [
        { key: 'shop', value: JSON.stringify({ n: 'not a number' }), headers: {} },
        { key: 'shop', value: JSON.stringify({ n: 15 }), headers: {} },
      ]);
      await waitFor(async () => (await applied()).includes(15), { timeoutMs: 60_000, message: 'record 15 applied' });
      expect(await behind()).toEqual({ rewound: 3, gone: 2 });
      expect(await applied()).toEqual([1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15]);
      // Sent before the batch's transaction, which then found the checkpoint behind: the batch applied again
      // sends it no second time.
      const dead = await bus.read(`${topic}.dlq`);
      expect(dead.map((d) => d.value.toString())).toEqual([JSON.stringify({ n: 'not a number' })]);
    } finally {
      await p.stop();
    }
  }, 240_000);
});
