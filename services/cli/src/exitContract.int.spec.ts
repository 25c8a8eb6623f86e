import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, runCli, startTestRuntime } from '@shopstream/harness';
import type { Runtime } from '@shopstream/runtime';
import { conversationWithMessage } from '@shopstream/testkit';
import { runCliCaptured, type CliRun } from './runCli.js';

/**
 * No silent exit (issue 22): a command that cannot reach PostgreSQL or Kafka says so in one line on stderr,
 * naming host:port (and the database), never the password, prints nothing on stdout and exits 1. Before,
 * `api-keys list`, `migrate` and `projections status` exited 0 with no output when PostgreSQL refused
 * connections, and a refusing broker gave a screen of JSON logs. Every command runs in process (runCli); the
 * issue's three run as an operator runs them too (`pnpm -s cli`, a child process), for the exit code itself.
 */
let rt: Runtime;
let dir: string;
let closedPort: number;
const PASSWORD = 'pw-7q2x9k';

/** A port nothing listens on: bound by the system, then released, and never listened on again by this test. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

beforeAll(async () => {
  rt = await startTestRuntime({}, 'cli-exit');
  dir = mkdtempSync(path.join(tmpdir(), 'cli-exit-'));
  closedPort = await freePort();
});

afterAll(async () => {
  await rt?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The runtime's environment, with PostgreSQL at a closed port (a password in the URL) or Kafka there. */
const dbDown = () => cliEnv(rt, { DATABASE_URL: `postgres://shopstream:${PASSWORD}@127.0.0.1:${closedPort}/shopdb` });
const kafkaDown = () => cliEnv(rt, { KAFKA_BROKERS: `127.0.0.1:${closedPort}` });

/** Exit 1, nothing on stdout, exactly one line on stderr that names what was out of reach, no password. */
function expectUnreachable(r: CliRun, what: RegExp): void {
  expect(r.stderr).not.toContain(PASSWORD);
  expect(r).toMatchObject({ code: 1, stdout: '' });
  expect(r.stderr.endsWith('\n')).toBe(true);
  expect(r.stderr.trimEnd().split('\n')).toEqual([expect.stringMatching(what)]);
}

const pgLine = () => new RegExp(`^PostgreSQL at 127\\.0\\.0\\.1:${closedPort}/shopdb is unreachable: .*ECONNREFUSED`);
const kafkaLine = () => new RegExp(`^Kafka at 127\\.0\\.0\\.1:${closedPort} is unreachable: .*ECONNREFUSED`);

/** Every command that opens the database or the bus, with arguments it accepts. */
function everyCommand(): { needsKafka: boolean; argv: string[] }[] {
  const shop = randomUUID();
  const id = randomUUID();
  const file = path.join(dir, `${randomUUID()}.jsonl`);
  writeFileSync(
    file,
    conversationWithMessage(shop, { at: new Date().toISOString(), text: 'hi' })
      .map((l) => JSON.stringify(l))
      .join('\n') + '\n',
  );
  const db = (...argv: string[]) => ({ needsKafka: false, argv });
  const bus = (...argv: string[]) => ({ needsKafka: true, argv });
  return [
    db('migrate'),
    db('api-keys', 'create', '--shop', shop),
    db('api-keys', 'list'),
    db('api-keys', 'revoke', id),
    db('flows', 'create', '--shop', shop, '--name', 'n', '--metric', 'm'),
    db('flows', 'list', '--shop', shop),
    db('flows', 'pause', id, '--shop', shop),
    db('flows', 'resume', id, '--shop', shop),
    db('flows', 'delete', id, '--shop', shop),
    bus('topics', 'ensure'),
    bus('conversations', 'import', file),
    bus('projections', 'status'),
    bus('projections', 'status', '--json'),
    bus('projections', 'rebuild', 'activity-projector', '--yes'),
    bus('dlq', 'list', 'events.dlq'),
    bus('dlq', 'list', 'events.dlq', '--json'),
    bus('dlq', 'redrive', 'events.dlq', '--dry-run', '--json'),
    bus('seed', 'conversations', '--shop', shop, '--count', '1'),
  ];
}

describe('a command that cannot reach its database or broker says which, in one line, and exits 1', () => {
  it('every command, PostgreSQL refusing connections: the line names host:port/database', async () => {
    const runs = await Promise.all(everyCommand().map(async ({ argv }) => ({ argv, r: await runCliCaptured(argv, dbDown()) })));
    for (const { argv, r } of runs) {
      expect.soft(r.code, argv.join(' ')).toBe(1);
      expectUnreachable(r, pgLine());
    }
  }, 180_000);

  it('every command that needs the log, Kafka refusing connections: the line names the broker', async () => {
    const runs = await Promise.all(
      everyCommand()
        .filter((c) => c.needsKafka)
        .map(async ({ argv }) => ({ argv, r: await runCliCaptured(argv, kafkaDown()) })),
    );
    for (const { argv, r } of runs) {
      expect.soft(r.code, argv.join(' ')).toBe(1);
      expectUnreachable(r, kafkaLine());
    }
  }, 180_000);

  // Child processes, one after another: each takes seconds of tsx start on a loaded machine.
  it('as an operator runs them (pnpm -s cli): api-keys list, migrate, projections status', async () => {
    for (const argv of [['api-keys', 'list'], ['migrate'], ['projections', 'status']]) expectUnreachable(await runCli(argv, dbDown(), 240_000), pgLine());
    expectUnreachable(await runCli(['projections', 'status', '--json'], kafkaDown(), 240_000), kafkaLine());
  }, 600_000);
});

describe('stdout holds the result alone', () => {
  it('every --json output parses as one JSON document, logs at any level going to stderr', async () => {
    const env = cliEnv(rt);
    const status = await runCliCaptured(['projections', 'status', '--json'], env);
    expect(status.code, status.stderr).toBe(0);
    expect((JSON.parse(status.stdout) as { projections: { projection: string }[] }).projections.map((p) => p.projection).sort()).toEqual([
      'activity-projector',
      'conversation-projector',
      'flow-matcher',
    ]);
    const list = await runCliCaptured(['dlq', 'list', 'events.dlq', '--json'], env);
    expect(list.code, list.stderr).toBe(0);
    expect(JSON.parse(list.stdout)).toEqual({ topic: rt.topics.dlq(rt.topics.events), deadLetters: [] });
    const redrive = await runCliCaptured(['dlq', 'redrive', 'events.dlq', '--dry-run', '--json'], env);
    expect(redrive.code, redrive.stderr).toBe(0);
    expect(JSON.parse(redrive.stdout)).toMatchObject({ topic: rt.topics.dlq(rt.topics.events), total: 0, redriven: 0, dryRun: true });

    // Logs are written to the process's own stderr (fd 2), seen only in a child: stdout parses at debug level.
    const child = await runCli(['projections', 'status', '--json'], cliEnv(rt, { LOG_LEVEL: 'debug' }), 240_000);
    expect(child.code, child.stderr).toBe(0);
    expect(Object.keys(JSON.parse(child.stdout) as object)).toEqual(['projections']);
    expect(child.stderr).toMatch(/^\{"level":20,.*"service":"cli"/m);
  }, 600_000);
});
