import { randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '@shopstream/db';
import { loadEnv } from '@shopstream/config';
import { headers as H, schemas, type EventRecord } from '@shopstream/contracts';
import type { BusRecord } from '@shopstream/bus';
import type { DeadLetter, RedriveReport } from '@shopstream/projections';
import { openRuntime, type Runtime } from '@shopstream/runtime';
import { startActivityProjector } from '@shopstream/activity-projector';
import { runCliCaptured } from '@shopstream/cli';
import { runCli, startTestRuntime, startTestServer, waitFor, type CliResult, type TestServer } from '@shopstream/harness';
import { eventRecordOf } from '@shopstream/testkit';

/**
 * `pnpm cli dlq list|redrive` as an operator runs them: a record the activity projector dead-lettered is
 * listed with its reason, and once its cause is gone a redrive lands it in the projection once; a second
 * redrive sends nothing. On Kafka, on the Postgres log on a server, embedded on its PostgreSQL (CLI run while
 * the server serves) and embedded on PGlite (CLI run while the server is stopped).
 */

/** The variables a spawned CLI gets: the given ones, set, and nothing from this process but PATH and HOME. */
function cliEnvFull(env: Record<string, string | undefined>): Record<string, string> {
  const given = Object.entries({ PATH: process.env.PATH, HOME: process.env.HOME, LOG_LEVEL: 'warn', ...env }).filter(([, v]) => v !== undefined);
  return Object.fromEntries(given) as Record<string, string>;
}

/** Generous for a tsx child on a loaded 2-core machine (seconds each when quiet): a deadline, not an expectation. */
const CHILD_TIMEOUT_MS = 240_000;

/** `pnpm cli dlq <args>` in this process (seconds saved per command over a tsx child), its output kept. */
const cli = (env: Record<string, string | undefined>, ...args: string[]): Promise<CliResult> => runCliCaptured(['dlq', ...args], cliEnvFull(env));

/**
 * `pnpm -s cli dlq <args>` as a child process, as an operator runs it: where another process is the point (an
 * embedded DATA_DIR's lock and running server are told apart by process id).
 */
const cliChild = (env: Record<string, string | undefined>, ...args: string[]): Promise<CliResult> =>
  runCli(['dlq', ...args], cliEnvFull(env), CHILD_TIMEOUT_MS);

/** The environment a CLI needs to open the same database and bus as the runtime. */
function cliEnv(rt: Runtime): Record<string, string | undefined> {
  return {
    DATABASE_URL: rt.env.DATABASE_URL,
    DATA_DIR: rt.env.DATABASE_URL ? undefined : rt.env.DATA_DIR,
    EMBEDDED_DB: rt.env.EMBEDDED_DB,
    KAFKA_BROKERS: rt.env.KAFKA_BROKERS?.join(','),
    TOPIC_PREFIX: rt.env.TOPIC_PREFIX,
    KAFKA_PARTITIONS: String(rt.env.KAFKA_PARTITIONS),
    CONSUMER_GROUP_PREFIX: rt.env.CONSUMER_GROUP_PREFIX,
  };
}

const eventRecord = (shop: string, name: string): EventRecord =>
  eventRecordOf({
    activity_id: randomUUID(),
    shop_id: shop,
    name,
    event_time: '2026-03-01T00:00:00Z',
    received_at: '2026-03-01T00:00:01Z',
    metric: { metric_name: 'placed', value: 1 },
    request_id: 'dlq-cli-spec',
  });

const eventHeaders = (shop: string) => ({ [H.contentType]: 'application/json', [H.schema]: schemas.eventRecorded, [H.shopId]: shop, origin: 'dlq-cli-spec' });

/** What the scenario left on the log: a record that cannot be decoded and one the database refused. */
interface Scenario {
  shop: string;
  blocked: EventRecord;
  dlqTopic: string;
}

/**
 * Publishes a hand-written undecodable record, then a valid event the database refuses for a reason that can
 * be removed (a CHECK constraint standing for a bug fixed since), and waits until the projector dead-lettered
 * both. The constraint stays: the caller drops it when the scenario says the cause is fixed.
 */
async function deadLetterTwo(rt: Runtime): Promise<Scenario> {
  const shop = randomUUID();
  const dlqTopic = rt.topics.dlq(rt.topics.events);
  await rt.db.query(sql`ALTER TABLE activities ADD CONSTRAINT dlq_cli_spec_blocked CHECK (name <> 'Blocked order')`);
  await rt.bus.publish(rt.topics.events, [{ key: shop, value: '{"activity_id": "oops"', headers: { [H.shopId]: shop } }]);
  const blocked = eventRecord(shop, 'Blocked order');
  await rt.bus.publish(rt.topics.events, [{ key: shop, value: JSON.stringify(blocked), headers: eventHeaders(shop) }]);
  await waitFor(async () => (await rt.bus.read(dlqTopic)).length === 2, { timeoutMs: 120_000, intervalMs: 300, message: 'both records dead-lettered' });
  return { shop, blocked, dlqTopic };
}

/** The records on a topic whose value mentions the id. */
const recordsWith = async (rt: Runtime, topic: string, id: string): Promise<BusRecord[]> =>
  (await rt.bus.read(topic)).filter((r) => r.value.toString().includes(id));

/** What `dlq list --json` and `dlq redrive` show for the scenario; the assertions both buses share. */
async function listShowsBoth(env: Record<string, string | undefined>, rt: Runtime, s: Scenario, dlqName: string): Promise<(DeadLetter & { value: string })[]> {
  const listed = await cli(env, 'list', dlqName, '--json');
  expect(listed.code, listed.stderr).toBe(0);
  const doc = JSON.parse(listed.stdout) as { topic: string; deadLetters: (DeadLetter & { value: string })[] };
  expect(doc.topic).toBe(s.dlqTopic);
  const [bad, refused] = doc.deadLetters.sort((a, b) => Number(a.sourceOffset) - Number(b.sourceOffset));
  expect(doc.deadLetters).toHaveLength(2);
  expect(bad).toMatchObject({ sourceTopic: rt.topics.events, key: s.shop, value: '{"activity_id": "oops"', redriven: null, headers: { [H.shopId]: s.shop } });
  expect(bad.reason).toMatch(/^invalid JSON: /);
  expect(refused).toMatchObject({ sourceTopic: rt.topics.events, key: s.shop, redriven: null, headers: eventHeaders(s.shop) });
  expect(refused.reason).toMatch(/^refused by the database: .*dlq_cli_spec_blocked/);
  expect(refused.value).toBe(JSON.stringify(s.blocked));
  expect(Date.parse(refused.deadLetteredAt)).not.toBeNaN();

  const text = await cli(env, 'list', dlqName);
  expect(text.code).toBe(0);
  expect(text.stdout).toContain(`${s.dlqTopic}: 2 dead letters, 0 redriven`);
  expect(text.stdout).toMatch(/DLQ PARTITION\/OFFSET +SOURCE TOPIC\/PARTITION\/OFFSET +KEY +DEAD-LETTERED AT +REDRIVEN +REDRIVES\/FAILED +REASON/);
  const line = text.stdout.split('\n').find((l) => l.includes(`${rt.topics.events}/${refused.sourcePartition}/${refused.sourceOffset} `));
  expect(line).toMatch(
    new RegExp(` ${s.shop} +\\S+Z +no +0/0 +refused by the database: new row for relation "activities" violates check constraint "dlq_cli_spec_blocked"$`),
  );
  expect(text.stdout).toMatch(/ no +0\/0 +invalid JSON: /);
  return doc.deadLetters;
}

const redriveBlocked = (env: Record<string, string | undefined>, dlqName: string, ...more: string[]) =>
  cli(env, 'redrive', dlqName, '--reason-contains', 'DLQ_CLI_SPEC_BLOCKED', ...more);

describe.each<[string, 'kafka' | 'pglog', Record<string, string>]>([
  ['Kafka', 'kafka', {}],
  ['the Postgres log on PostgreSQL', 'pglog', { KAFKA_BROKERS: '' }],
])('pnpm cli dlq on %s', (_name, kind, overrides) => {
  let rt: Runtime;
  let server: TestServer;
  let env: Record<string, string | undefined>;
  let s: Scenario;

  beforeAll(async () => {
    rt = await startTestRuntime({ ...overrides, CONSUMER_GROUP_PREFIX: `dlq-cli-${randomUUID()}.` }, 'dlq-cli');
    env = cliEnv(rt);
    server = await startTestServer(rt, [await startActivityProjector(rt)]);
    s = await deadLetterTwo(rt);
  }, 300_000);
  afterAll(async () => {
    await server?.stop();
    await rt?.close();
  });

  it('list shows each dead letter with its source, key, reason and time; unknown topics are usage errors', async () => {
    expect(rt.bus.selfManaged).toBe(kind === 'pglog');
    // The unprefixed name an operator types.
    const listed = await listShowsBoth(env, rt, s, 'events.dlq');
    // Where it came from: the events record at that partition and offset is the very record.
    const refused = listed.find((d) => d.reason?.startsWith('refused'))!;
    const [source] = await rt.bus.read(rt.topics.events, { partition: refused.sourcePartition!, fromOffset: refused.sourceOffset!, limit: 1 });
    expect(source.value.toString()).toBe(JSON.stringify(s.blocked));
    const unknown = await cli(env, 'list', 'events');
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain(`Unknown dead-letter topic "events": one of ${rt.topics.events}.dlq, `);
    const empty = await cli(env, 'list', 'conversations.dlq');
    expect(empty).toMatchObject({ code: 0, stdout: `${rt.topics.conversations}.dlq holds no dead letters.\n` });
  }, 300_000);

  it('redrive sends a record whose cause is gone back once: it lands in the projection once, and a second run sends nothing', async () => {
    await rt.db.query(sql`ALTER TABLE activities DROP CONSTRAINT dlq_cli_spec_blocked`);
    const eventsEnd = await rt.bus.offsets(rt.topics.events);

    const dry = await redriveBlocked(env, s.dlqTopic, '--dry-run');
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout.trim()).toBe(`Would redrive 1 of 2 dead letters in ${s.dlqTopic} (0 already redriven, 1 not matching) back to ${rt.topics.events}.`);
    expect(await rt.bus.offsets(rt.topics.events)).toEqual(eventsEnd);
    expect(await rt.db.query(sql`SELECT 1 FROM dlq_redrives`)).toEqual([]);

    const first = await redriveBlocked(env, s.dlqTopic);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout.trim()).toBe(`Redrove 1 of 2 dead letters in ${s.dlqTopic} (0 already redriven, 1 not matching) back to ${rt.topics.events}.`);
    await waitFor(async () => (await rt.db.query(sql`SELECT 1 FROM activities WHERE id = ${s.blocked.activity_id}`)).length === 1, {
      timeoutMs: 120_000,
      message: 'the redriven event projected',
    });
    const [row] = await rt.db.query(sql`SELECT shop_id, name, recorded_at FROM activities WHERE id = ${s.blocked.activity_id}`);
    expect(row).toEqual({ shop_id: s.shop, name: 'Blocked order', recorded_at: new Date(s.blocked.received_at) });

    // On the log: one copy, with its key and original headers, where it came from instead of the dlq_* ones.
    const sent = (await recordsWith(rt, rt.topics.events, s.blocked.activity_id)).filter((r) => r.headers[H.redrivenFrom]);
    expect(sent).toHaveLength(1);
    const refused = (await rt.bus.read(s.dlqTopic)).find((r) => r.value.toString().includes(s.blocked.activity_id))!;
    expect(sent[0].key).toBe(s.shop);
    expect(sent[0].value.toString()).toBe(JSON.stringify(s.blocked));
    expect(sent[0].headers).toEqual({ ...eventHeaders(s.shop), [H.redrivenFrom]: `${s.dlqTopic}/${refused.partition}/${refused.offset}` });
    // The projector emitted its metric event once.
    await waitFor(async () => (await recordsWith(rt, rt.topics.metrics, s.blocked.activity_id)).length === 1, {
      timeoutMs: 120_000,
      message: 'its metric event',
    });

    const second = await redriveBlocked(env, s.dlqTopic, '--json');
    expect(second.code, second.stderr).toBe(0);
    expect(JSON.parse(second.stdout)).toMatchObject<Partial<RedriveReport>>({
      topic: s.dlqTopic,
      to: rt.topics.events,
      total: 2,
      redriven: 0,
      alreadyRedriven: 1,
      notMatching: 1,
      resent: 0,
      inFlight: 0,
      unredrivable: 0,
    });
    const afterFirst = await rt.bus.offsets(rt.topics.events);
    expect(afterFirst.reduce((n, p) => n + Number(p.high), 0)).toBe(eventsEnd.reduce((n, p) => n + Number(p.high), 0) + 1);
    expect((await recordsWith(rt, rt.topics.events, s.blocked.activity_id)).filter((r) => r.headers[H.redrivenFrom])).toHaveLength(1);
    expect(await rt.db.query(sql`SELECT count(*)::int AS n FROM activities WHERE shop_id = ${s.shop}`)).toEqual([{ n: 1 }]);

    // list says which one was redriven.
    const listed = JSON.parse((await cli(env, 'list', s.dlqTopic, '--json')).stdout) as { deadLetters: DeadLetter[] };
    const marks = listed.deadLetters.map((d) => [d.reason?.split(':')[0], d.redriven?.state ?? null]).sort();
    expect(marks).toEqual([
      ['invalid JSON', null],
      ['refused by the database', 'sent'],
    ]);
    const text = await cli(env, 'list', s.dlqTopic, '--reason-contains', 'refused');
    expect(text.stdout).toContain(`${s.dlqTopic}: 1 dead letter whose reason matches, 1 redriven`);

    // projections status counts the dead letters and how many of them were sent back.
    const { stdout } = await runCliCaptured(['projections', 'status', '--json'], cliEnvFull(env));
    const activity = (JSON.parse(stdout).projections as { projection: string; deadLetters: number; deadLettersRedriven: number }[]).find(
      (p) => p.projection === 'activity-projector',
    );
    expect(activity).toMatchObject({ deadLetters: 2, deadLettersRedriven: 1 });
  }, 300_000);

  it('a record that can never succeed stays one dead letter: later redrives leave it unless --again, which sends it once more', async () => {
    // The undecodable record fails on every redrive. Unfiltered runs, as an operator sweeping the topic does.
    const held = async () => (await rt.bus.offsets(s.dlqTopic)).reduce((n, p) => n + Number(p.high) - Number(p.low), 0);
    const redrive = async (...more: string[]) => {
      const r = await cli(env, 'redrive', 'events.dlq', '--json', ...more);
      expect(r.code, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as RedriveReport;
    };
    expect(await held()).toBe(2);
    expect(await redrive()).toMatchObject({ total: 2, redriven: 1, alreadyRedriven: 1 });
    await waitFor(async () => (await held()) === 3, { timeoutMs: 60_000, intervalMs: 300, message: 'the redriven copy dead-lettered again' });
    for (let run = 2; run <= 3; run++) {
      const r = await redrive();
      // Not sent again, so not refused again: the topic keeps the two copies.
      expect(r.redriven).toBe(0);
      expect(r).toMatchObject({ total: 2, alreadyRedriven: 1, failedAgain: 1 });
    }
    expect(await held()).toBe(3);

    const listed = JSON.parse((await cli(env, 'list', 'events.dlq', '--json')).stdout) as { deadLetters: DeadLetter[] };
    const poison = listed.deadLetters.find((d) => d.reason?.startsWith('invalid JSON'))!;
    expect(listed.deadLetters).toHaveLength(2);
    expect(poison).toMatchObject({ redrives: 1, failedAgain: 1, redriven: null, copies: [expect.any(String), `${poison.partition}/${poison.offset}`] });
    const text = await cli(env, 'list', 'events.dlq');
    expect(text.stdout).toContain(`${s.dlqTopic}: 2 dead letters, 1 redriven, 1 refused again after a redrive (sent again only with --again)`);
    expect(text.stdout).toMatch(/ no +1\/1 +invalid JSON: /);

    // --again: the latest copy, once; refused once more, still one dead letter.
    expect(await redrive('--again')).toMatchObject({ total: 2, redriven: 1, alreadyRedriven: 1, failedAgain: 0 });
    await waitFor(async () => (await held()) === 4, { timeoutMs: 60_000, intervalMs: 300, message: 'the copy sent with --again dead-lettered again' });
    const after = JSON.parse((await cli(env, 'list', 'events.dlq', '--json')).stdout) as { deadLetters: DeadLetter[] };
    expect(after.deadLetters).toHaveLength(2);
    expect(after.deadLetters.find((d) => d.reason?.startsWith('invalid JSON'))).toMatchObject({ redrives: 2, failedAgain: 2, redriven: null });
  }, 300_000);
});

describe('pnpm cli dlq, embedded on PGlite (EMBEDDED_DB=pglite: one process at a time)', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-dlq-'));
  const open = () =>
    openRuntime(
      loadEnv({
        DATA_DIR: path.join(dir, '.data'),
        EMBEDDED_DB: 'pglite',
        TOPIC_PREFIX: '',
        KAFKA_PARTITIONS: '3',
        LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
        CONSUMER_GROUP_PREFIX: 'embedded.',
      }),
      'dlq-embedded',
    );
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('is refused while the server holds the data directory, lists and redrives once it stopped, and the projector applies the record at its next start', async () => {
    let rt = await open();
    const env = cliEnv(rt);
    let server = await startTestServer(rt, [await startActivityProjector(rt)]);
    let s: Scenario;
    try {
      s = await deadLetterTwo(rt);
      const busy = await cliChild(env, 'list', 'events.dlq');
      expect(busy.code).toBe(2);
      expect(busy.stderr).toMatch(/held by process \d+/);
      await rt.db.query(sql`ALTER TABLE activities DROP CONSTRAINT dlq_cli_spec_blocked`);
    } finally {
      await server.stop();
      await rt.close();
    }

    await listShowsBoth(env, rt, s, 'events.dlq');
    const first = await redriveBlocked(env, 'events.dlq');
    expect(first.stdout.trim()).toBe('Redrove 1 of 2 dead letters in events.dlq (0 already redriven, 1 not matching) back to events.');
    const second = await redriveBlocked(env, 'events.dlq');
    expect(second.stdout.trim()).toBe('Redrove 0 of 2 dead letters in events.dlq (1 already redriven, 1 not matching) back to events.');

    rt = await open();
    server = await startTestServer(rt, [await startActivityProjector(rt)]);
    try {
      await waitFor(async () => (await rt.db.query(sql`SELECT 1 FROM activities WHERE id = ${s.blocked.activity_id}`)).length === 1, {
        timeoutMs: 120_000,
        message: 'the redriven event projected after the restart',
      });
      expect((await recordsWith(rt, 'events', s.blocked.activity_id)).map((r) => r.headers[H.redrivenFrom] ?? null)).toEqual([
        null,
        expect.stringMatching(/^events\.dlq\/\d+\/\d+$/),
      ]);
    } finally {
      await server.stop();
      await rt.close();
    }
  }, 600_000);
});

describe('pnpm cli dlq, embedded on its PostgreSQL (the default)', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-dlq-pg-'));
  chmodSync(dir, 0o755); // as root, the embedded PostgreSQL runs as another OS user, who must enter it
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('lists and redrives while the server runs, against its data, and the live projector applies the record once', async () => {
    const rt = await openRuntime(
      loadEnv({
        DATA_DIR: path.join(dir, '.data'),
        EMBEDDED_DB: 'postgres',
        TOPIC_PREFIX: '',
        KAFKA_PARTITIONS: '3',
        LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
        CONSUMER_GROUP_PREFIX: 'embedded.',
      }),
      'dlq-embedded-pg',
    );
    const env = cliEnv(rt);
    const server = await startTestServer(rt, [await startActivityProjector(rt)]);
    try {
      const s = await deadLetterTwo(rt);
      await rt.db.query(sql`ALTER TABLE activities DROP CONSTRAINT dlq_cli_spec_blocked`);
      await listShowsBoth(env, rt, s, 'events.dlq');
      // From another process, as `pnpm start` and an operator's shell are: it attaches to the running server.
      const first = await cliChild(env, 'redrive', 'events.dlq', '--reason-contains', 'DLQ_CLI_SPEC_BLOCKED');
      expect(first.stdout.trim()).toBe('Redrove 1 of 2 dead letters in events.dlq (0 already redriven, 1 not matching) back to events.');
      await waitFor(async () => (await rt.db.query(sql`SELECT 1 FROM activities WHERE id = ${s.blocked.activity_id}`)).length === 1, {
        timeoutMs: 120_000,
        message: 'the redriven event projected by the running server',
      });
      const second = await redriveBlocked(env, 'events.dlq');
      expect(second.stdout.trim()).toBe('Redrove 0 of 2 dead letters in events.dlq (1 already redriven, 1 not matching) back to events.');
      expect(await rt.db.query(sql`SELECT count(*)::int AS n FROM activities WHERE id = ${s.blocked.activity_id}`)).toEqual([{ n: 1 }]);
    } finally {
      await server.stop();
      await rt.close();
    }
  }, 600_000);
});
