import { afterAll, describe, expect, it } from 'vitest';
import { createKafkaBus, createPgLogBus, ownedTopicSpecs, topicNames, type Bus } from '@shopstream/bus';
import { connectPostgres, migrate, sql } from '@shopstream/db';
import { checkTopicRetention, type Runtime } from '@shopstream/runtime';
import { createLogger, type Logger } from '@shopstream/telemetry';
import { createTestDatabase, testInfra, uniquePrefix } from '@shopstream/testkit';
import { cliEnv, startTestRuntime } from '@shopstream/harness';
import { runCliCaptured } from '../runCli.js';
import { ensureTopics } from './topics.js';

const logger = createLogger('topics-test', process.env.TEST_LOG_LEVEL ?? 'silent');
const DERIVED_MS = '3600000';

const open: { close(): Promise<void> }[] = [];
afterAll(async () => {
  for (const o of open.reverse()) await o.close();
});
const runtime = async (overrides: Record<string, string | undefined>) => {
  const rt = await startTestRuntime({ DERIVED_TOPIC_RETENTION_MS: DERIVED_MS, ...overrides }, 'topics-test');
  open.push(rt);
  return rt;
};
const specsOf = (rt: Runtime) => ownedTopicSpecs(rt.topics, { partitions: rt.env.KAFKA_PARTITIONS, derivedRetentionMs: rt.env.DERIVED_TOPIC_RETENTION_MS });
/** retention.ms and retention.bytes of every owned topic, as the log reports them, by role. */
const retentionByRole = async (rt: Runtime) => {
  const specs = specsOf(rt);
  const configs = await rt.bus.topicConfigs(specs.map((s) => s.topic));
  return specs.map((s) => ({ topic: s.topic, role: s.role, ms: configs[s.topic]['retention.ms'], bytes: configs[s.topic]['retention.bytes'] }));
};
const expectedByRole = (rt: Runtime) => specsOf(rt).map((s) => ({ topic: s.topic, role: s.role, ms: s.role === 'derived' ? DERIVED_MS : '-1', bytes: '-1' }));

/** A logger that keeps what was warned, to check the start-up warning's words. */
const warnings = () => {
  const lines: { obj: unknown; msg: string }[] = [];
  return { lines, logger: { warn: (obj: unknown, msg: string) => lines.push({ obj, msg }) } as unknown as Logger };
};

/** `pnpm cli topics ensure` (in process), against the runtime's broker, database and prefix. */
const cliEnsure = (rt: Runtime) => runCliCaptured(['topics', 'ensure'], cliEnv(rt, { DERIVED_TOPIC_RETENTION_MS: DERIVED_MS }));

describe('retention by role on Kafka', () => {
  it('services create source and dead-letter topics keeping every record, derived topics keeping DERIVED_TOPIC_RETENTION_MS', async () => {
    const rt = await runtime({});
    expect(await retentionByRole(rt)).toEqual(expectedByRole(rt));
    const w = warnings();
    expect(await checkTopicRetention(rt.bus, specsOf(rt), w.logger)).toEqual([]);
    expect(w.lines).toEqual([]);
  }, 180_000);

  it('topics ensure brings existing topics to their role, keeps their other settings, says what it changed, and changes nothing the second time', async () => {
    const prefix = uniquePrefix();
    const names = topicNames(prefix);
    // Topics as an older Shopstream or an operator left them: events deleting after a day, with its own
    // max.message.bytes; metrics with no retention of its own (the broker's default applies).
    const old: Bus = await createKafkaBus({ brokers: testInfra().kafkaBrokers, clientId: 'topics-test-old', replicationFactor: 1, logger });
    open.push(old);
    await old.ensureTopics([
      { topic: names.events, partitions: 3, config: { 'retention.ms': '86400000', 'max.message.bytes': '2097152' } },
      { topic: names.metrics, partitions: 3 },
    ]);
    const rt = await runtime({ TOPIC_PREFIX: prefix });

    // What a service says at start.
    const w = warnings();
    expect(await checkTopicRetention(rt.bus, specsOf(rt), w.logger)).toEqual([{ topic: names.events, config: 'retention.ms', value: '86400000' }]);
    expect(w.lines.map((l) => l.msg)).toEqual([
      `topic ${names.events} has retention.ms=86400000: the log deletes records that projections are rebuilt from; run \`pnpm cli topics ensure\` to keep them all`,
    ]);

    const first = await ensureTopics(rt);
    expect(first.changes).toEqual([
      { topic: names.events, name: 'retention.ms', from: '86400000', inherited: false, to: '-1' },
      { topic: names.events, name: 'retention.bytes', from: '-1', inherited: true, to: '-1' },
      { topic: names.metrics, name: 'retention.ms', from: expect.any(String), inherited: true, to: DERIVED_MS },
      { topic: names.metrics, name: 'retention.bytes', from: '-1', inherited: true, to: '-1' },
    ]);
    expect(first.lines[0]).toBe(`Topics on Kafka at ${rt.env.KAFKA_BROKERS?.join(',')}:`);
    expect(first.lines).toContain('Changed 4 settings:');
    expect(first.lines).toContain(`  ${names.events} retention.ms: 86400000 -> -1`);
    expect(first.lines).toContain(`  ${names.metrics} retention.ms: ${first.changes[2].from} (broker default) -> ${DERIVED_MS}`);
    expect(await retentionByRole(rt)).toEqual(expectedByRole(rt));
    const events = (await rt.bus.topicConfigs([names.events]))[names.events];
    expect(events['max.message.bytes']).toBe('2097152');
    expect(events['min.insync.replicas']).toBe('1');
    expect(await checkTopicRetention(rt.bus, specsOf(rt), warnings().logger)).toEqual([]);

    const second = await cliEnsure(rt);
    expect(second).toMatchObject({ code: 0, stderr: '' });
    const lines = second.stdout
      .trimEnd()
      .split('\n')
      .map((l) => l.trim().split(/\s{2,}/));
    expect(lines).toContainEqual([names.events, 'source: keeps every record']);
    expect(lines).toContainEqual([names.dlq(names.events), 'dead-letter: keeps every record']);
    expect(lines).toContainEqual([names.metrics, `derived: keeps ${DERIVED_MS} ms`]);
    expect(second.stdout.trimEnd().split('\n').at(-1)).toBe('Nothing changed: every topic already had the settings of its role.');
  }, 300_000);
});

describe('retention by role on the Postgres log', () => {
  it('services give topics an older version created (all kept forever) the retention of their role at start', async () => {
    const url = await createTestDatabase(testInfra().databaseUrl);
    const db = connectPostgres({ url, poolSize: 2 });
    open.push(db);
    await migrate(db);
    const prefix = uniquePrefix();
    const old = await createPgLogBus({ db, logger, trimIntervalMs: 0 });
    await old.ensureTopics(
      ownedTopicSpecs(topicNames(prefix), { partitions: 3, derivedRetentionMs: 1 }).map(({ topic, partitions }) => ({ topic, partitions })),
    );
    await old.close();
    expect((await db.query(sql`SELECT DISTINCT retention_ms FROM bus_topics WHERE topic LIKE ${`${prefix}%`}`)).map((r) => String(r.retention_ms))).toEqual([
      '-1',
    ]);

    const rt = await runtime({ KAFKA_BROKERS: undefined, DATABASE_URL: url, TOPIC_PREFIX: prefix });
    expect(rt.bus.description).toBe('the Postgres log');
    expect(await retentionByRole(rt)).toEqual(expectedByRole(rt));
    const again = await ensureTopics(rt);
    expect(again.changes).toEqual([]);
    expect(again.lines.at(-1)).toBe('Nothing changed: every topic already had the settings of its role.');
  }, 180_000);
});
