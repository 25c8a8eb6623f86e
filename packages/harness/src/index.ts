import { execFile, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { openEmbeddedPostgres, runningServer, sql, type Db } from '@shopstream/db';
import { loadEnv } from '@shopstream/config';
import { openRuntime, serve, type Runtime, type StartedService } from '@shopstream/runtime';
import type { BusRecord } from '@shopstream/bus';
import type { ProjectionDefinition } from '@shopstream/projections';
import { createTestDatabase, testInfra, uniquePrefix, waitFor } from '@shopstream/testkit';

export { waitFor };

/**
 * A Runtime on the run's real Kafka and Postgres, with a database and topic names of its own, so spec
 * files never share state. Pass env overrides to change any setting (e.g. KAFKA_BROKERS).
 */
export async function startTestRuntime(overrides: Record<string, string | undefined> = {}, name = 'test'): Promise<Runtime> {
  const { kafkaBrokers, databaseUrl } = testInfra();
  const url = await createTestDatabase(databaseUrl);
  const env = loadEnv({
    DATABASE_URL: url,
    KAFKA_BROKERS: kafkaBrokers.join(','),
    TOPIC_PREFIX: uniquePrefix(),
    KAFKA_PARTITIONS: '3',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    // The Kafka adapter of the run: `KAFKA_CLIENT=platformatic pnpm test` runs every spec on @platformatic/kafka.
    KAFKA_CLIENT: process.env.KAFKA_CLIENT,
    CURSOR_SECRET: 'test-cursor-secret-0123456789',
    // Consumer groups of their own too: spec files sharing a group would rebalance against each other.
    CONSUMER_GROUP_PREFIX: `${randomUUID()}.`,
    // Tests post thousands of events with one key: the per-key ingest limit is off unless a test sets it.
    INGEST_RATE_LIMIT_PER_SECOND: '0',
    INGEST_RATE_LIMIT_PER_MINUTE: '0',
    ...overrides,
  });
  return openRuntime(env, name);
}

export interface TestServer {
  baseUrl: string;
  stop(): Promise<void>;
}

/**
 * Serves the services' routes on a free port of 127.0.0.1, exactly as a service process would; `projections`
 * are those /status reports.
 */
export async function startTestServer(rt: Runtime, services: StartedService[], projections: ProjectionDefinition<unknown>[] = []): Promise<TestServer> {
  const { server, stop } = await serve(rt, services, { port: 0, host: '127.0.0.1', name: 'test', projections });
  return { baseUrl: `http://127.0.0.1:${server.port}`, stop };
}

/** A new shop id and an API key granted it: the headers a request needs. */
export async function createTestShop(rt: Runtime, shopId: string = randomUUID()): Promise<{ shopId: string; key: string; headers: Record<string, string> }> {
  const { secret } = await rt.apiKeys.create([shopId], 'test');
  return { shopId, key: secret, headers: { authorization: `Bearer ${secret}`, 'x-shop-id': shopId, 'content-type': 'application/json' } };
}

/**
 * A PostgreSQL of the test's own (the embedded mode's engine in a temporary directory), so stopping it
 * disturbs no one. `start` starts it (again on the same port after a stop) and gives the owner's connection,
 * whose close is a `pg_ctl stop`; `url` is the database's once started; `remove` deletes the directory.
 */
export function ownTestPostgres(name: string): { dataDir: string; start(): Promise<Db>; readonly url: string; remove(): void } {
  const dir = mkdtempSync(path.join(tmpdir(), `shopstream-${name}-`));
  chmodSync(dir, 0o755); // as root, the server runs as another OS user, who must be able to enter it
  const dataDir = path.join(dir, 'data');
  let port: number | undefined;
  return {
    dataDir,
    async start() {
      const owner = await openEmbeddedPostgres(dataDir, port === undefined ? { poolSize: 1 } : { poolSize: 1, port });
      port ??= runningServer(dataDir)!.port;
      return owner;
    },
    get url() {
      if (port === undefined) throw new Error('ownTestPostgres: not started');
      return `postgres://postgres@127.0.0.1:${port}/shopstream`;
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/**
 * Services on a PostgreSQL of the test's own (ownTestPostgres), for a test of an outage: `start` opens a Runtime on
 * it (with `overrides`) and serves `services(rt)`; `stopPostgres` (a `pg_ctl stop`) takes the server away from under
 * them and `startPostgres` brings it back; `close` stops whatever is running and removes the directory.
 */
export function servicesOnOwnPostgres(name: string) {
  const pg = ownTestPostgres(name);
  let owner: Db | undefined;
  let rt: Runtime | undefined;
  let server: TestServer | undefined;
  return {
    async start(
      overrides: Record<string, string | undefined>,
      services: (rt: Runtime) => Promise<StartedService[]>,
    ): Promise<{ rt: Runtime; server: TestServer }> {
      owner = await pg.start();
      rt = await startTestRuntime({ DATABASE_URL: pg.url, ...overrides }, name);
      server = await startTestServer(rt, await services(rt));
      return { rt, server };
    },
    async stopPostgres(): Promise<void> {
      await owner?.close();
      owner = undefined;
    },
    async startPostgres(): Promise<void> {
      owner = await pg.start();
    },
    async close(): Promise<void> {
      await server?.stop().catch(() => {});
      await rt?.close().catch(() => {});
      await owner?.close().catch(() => {});
      pg.remove();
    },
  };
}

/** Waits until a child process has exited: its exit code and the signal that ended it. */
export function exitOf(child: ChildProcess, opts: { timeoutMs: number; message?: string }): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return waitFor(() => (child.exitCode !== null || child.signalCode !== null ? { code: child.exitCode, signal: child.signalCode } : undefined), {
    timeoutMs: opts.timeoutMs,
    message: opts.message ?? 'exit',
  });
}

/**
 * Reads a topic from the beginning in a fresh consumer group until `until(records)` holds, then returns
 * every record read. Goes through the Bus port, so it works on Kafka and on the Postgres log alike.
 */
export async function readTopic(rt: Runtime, topic: string, until: (records: BusRecord[]) => boolean, timeoutMs = 20_000): Promise<BusRecord[]> {
  const records: BusRecord[] = [];
  const sub = await rt.bus.consume({
    groupId: `test-reader-${randomUUID()}`,
    topics: [topic],
    fromBeginning: true,
    handleBatch: async (b) => {
      records.push(...b.records);
    },
  });
  try {
    await waitFor(() => until(records), { timeoutMs, message: `records on ${topic} (read ${records.length})` });
    return records;
  } finally {
    await sub.stop();
  }
}

export const json = (r: BusRecord): any => JSON.parse(r.value.toString('utf8'));

/**
 * The sum of a metric's series whose labels include every one of `labels` (each as `name="value"`), read from the
 * server's /metrics: 0 when none matches.
 */
export async function metricSum(baseUrl: string, name: string, labels: string[]): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) && labels.every((x) => l.includes(x)))
    .reduce((n, l) => n + Number(l.split(' ').pop()), 0);
}

/**
 * POSTs `body` to `baseUrl` + `route` and gives up on it while its contacts' look-up waits: the contacts table is
 * locked, the look-up is seen waiting on it in pg_stat_activity, the client destroys its socket, and the server
 * counts the request as 499; then the lock goes. The request (its events must carry a contact) goes on to find its
 * client gone; with `failLookup`, its look-up's connection is terminated first, so the request fails instead (as when
 * the database goes away under it). Resolves once the lock is released; what the request then does is the caller's
 * to wait for.
 */
export async function giveUpDuringContactLookup(
  rt: Runtime,
  baseUrl: string,
  route: string,
  headers: Record<string, string>,
  body: unknown,
  opts: { failLookup?: boolean } = {},
): Promise<void> {
  const closedBefore = await metricSum(baseUrl, 'shopstream_http_requests_total', [`route="${route}"`, 'status="499"']);
  const client = http.request(`${baseUrl}${route}`, { method: 'POST', headers });
  client.on('error', () => {}); // the socket destroyed below
  const waiting = async () =>
    (await rt.db.query(sql`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE '%contacts%'`)).map(
      (r) => Number(r.pid),
    );
  await rt.db.tx(async (tx) => {
    await tx.query(sql`LOCK TABLE contacts IN ACCESS EXCLUSIVE MODE`);
    client.end(JSON.stringify(body));
    await waitFor(async () => (await waiting()).length > 0, { message: "the request's contact look-up waiting on the lock" });
    // The client gives up while its request waits; the server sees the connection closed.
    client.destroy();
    await waitFor(async () => (await metricSum(baseUrl, 'shopstream_http_requests_total', [`route="${route}"`, 'status="499"'])) > closedBefore, {
      message: 'the request counted as 499',
    });
    if (opts.failLookup) for (const pid of await waiting()) await tx.query(sql`SELECT pg_terminate_backend(${pid})`);
  });
}

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/**
 * The variables a CLI needs to open the runtime's database and bus, plus `extra` (a variable given undefined is
 * left out): nothing else from this process but PATH and HOME.
 */
export function cliEnv(rt: Runtime, extra: Record<string, string | undefined> = {}): Record<string, string> {
  const all = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    LOG_LEVEL: 'warn',
    DATABASE_URL: rt.env.DATABASE_URL,
    KAFKA_BROKERS: rt.env.KAFKA_BROKERS?.join(','),
    TOPIC_PREFIX: rt.env.TOPIC_PREFIX,
    KAFKA_PARTITIONS: String(rt.env.KAFKA_PARTITIONS),
    CONSUMER_GROUP_PREFIX: rt.env.CONSUMER_GROUP_PREFIX,
    ...extra,
  };
  return Object.fromEntries(Object.entries(all).filter((e): e is [string, string] => e[1] !== undefined));
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * `pnpm -s cli <args>` from the checkout, as an operator runs it, with exactly `env` (see cliEnv); stdout and
 * stderr are pipes, not a terminal. Resolves with the exit code and both outputs, whatever the code.
 */
export function runCli(args: string[], env: Record<string, string>, timeoutMs = 120_000): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    execFile('pnpm', ['-s', 'cli', ...args], { cwd: REPO, env, timeout: timeoutMs }, (err, stdout, stderr) => {
      if (err && typeof err.code !== 'number') reject(err);
      else resolve({ code: err ? Number(err.code) : 0, stdout, stderr });
    });
  });
}
