import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, chownSync, existsSync, readdirSync, realpathSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { ContainerRuntimeClient } from 'testcontainers';
import { dockerEngine } from './docker.js';
import {
  accountIds,
  delay,
  errorText,
  findExecutable,
  freePort,
  log,
  once,
  pollUntil,
  runCommand,
  startServer,
  stopChild,
  sweepRuns,
  tcpAnswers,
} from './proc.js';
import { InfraUnavailableError } from './unavailable.js';
import { POSTGRES_IMAGE } from './versions.js';

export type PostgresSource = 'env' | 'docker' | 'existing' | 'local';

export interface PostgresHandle {
  /** An admin database on the server; tests make their own databases with createTestDatabase. */
  url: string;
  version: string;
  source: PostgresSource;
  /** Set for a server testkit started itself: lets another process (`pnpm infra down`) stop it. */
  pid?: number;
  containerId?: string;
  runDir?: string;
  stop(): Promise<void>;
}

export interface PostgresOptions {
  /** Leave a server testkit starts running after this process exits (`pnpm infra up`). */
  detached?: boolean;
  /** Port for a server testkit starts, when free; otherwise any free port. */
  port?: number;
  /** Where an already running server is looked for. */
  existingPort?: number;
  /** Where a throw-away cluster keeps its data; a fresh dir under the OS temp dir by default. */
  runDir?: string;
  /** 'test' (default) runs without fsync and stops with an immediate shutdown; 'dev' stays durable. */
  profile?: 'test' | 'dev';
  /** A throw-away cluster with ssl=on, serving this certificate and key (PEM files; copied into its run dir). */
  tls?: { certFile: string; keyFile: string };
}

/** Names a database as made by one test run, so that run's teardown can drop exactly its own. */
export const TEST_RUN_ENV = 'SHOPSTREAM_TEST_RUN';
const RUN_COMMENT = 'shopstream-testkit run ';

/**
 * A PostgreSQL server for tests or development: DATABASE_URL, else a container when a Docker engine
 * answers, else a server already answering on 127.0.0.1:5432, else a throw-away cluster.
 */
export async function ensurePostgres(options: PostgresOptions = {}): Promise<PostgresHandle> {
  const fromEnv = process.env.DATABASE_URL?.trim();
  if (fromEnv) {
    // It was asked for explicitly: a server that does not answer is an error, not a reason to start another.
    const version = await waitForPostgres(fromEnv, { what: `PostgreSQL at DATABASE_URL`, timeoutMs: 30_000 });
    return { url: fromEnv, version, source: 'env', stop: async () => {} };
  }
  const docker = await dockerEngine();
  if (docker.ok) return startPostgresContainer(docker.client, options);

  const existingPort = options.existingPort ?? 5432;
  const existingUrl = `postgres://postgres@127.0.0.1:${existingPort}/postgres`;
  const existing = await probeExisting(existingUrl, existingPort);
  if (existing.ok) return { url: existingUrl, version: existing.version, source: 'existing', stop: async () => {} };

  const missing = localPostgresMissing();
  if (!missing) return startLocalPostgres(options);
  throw new InfraUnavailableError(
    'PostgreSQL',
    {
      env: 'DATABASE_URL is not set',
      docker: docker.reason,
      local: `no usable server on 127.0.0.1:${existingPort} (${existing.reason}), and ${missing}`,
    },
    'set DATABASE_URL to a server where the tests may create databases; or start a Docker engine; or run ' +
      'PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth); or install the PostgreSQL server package ' +
      '(initdb and postgres on PATH or in /usr/lib/postgresql/*/bin).',
  );
}

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>, timeoutMs = 5_000): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: timeoutMs });
  // A server going away mid-probe emits 'error' on the client; without a listener that kills the process.
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function serverVersion(url: string): Promise<string> {
  return withClient(url, async (c) => (await c.query<{ server_version: string }>('SHOW server_version')).rows[0]!.server_version);
}

export async function waitForPostgres(url: string, opts: { what: string; timeoutMs: number; abort?: () => string | undefined }): Promise<string> {
  return pollUntil(opts.what, () => serverVersion(url), { timeoutMs: opts.timeoutMs, intervalMs: 100, abort: opts.abort });
}

async function probeExisting(url: string, port: number): Promise<{ ok: true; version: string } | { ok: false; reason: string }> {
  // A bare TCP check first: pg's own connect on a dead port is slower to give up.
  if (!(await tcpAnswers('127.0.0.1', port))) return { ok: false, reason: 'nothing listens there' };
  try {
    return { ok: true, version: await serverVersion(url) };
  } catch (err) {
    return { ok: false, reason: `it refused user postgres: ${errorText(err)}` };
  }
}

interface PostgresBins {
  initdb: string;
  postgres: string;
}

/** initdb and postgres from one installation: PATH first, else the newest Debian-style versioned dir. */
function findPostgresBins(): PostgresBins | undefined {
  const initdb = findExecutable('initdb');
  if (initdb) {
    const dir = path.dirname(realpathSync(initdb));
    const postgres = path.join(dir, 'postgres');
    if (existsSync(postgres)) return { initdb, postgres };
  }
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root)
    .filter((v) => /^\d+(\.\d+)?$/.test(v))
    .sort((a, b) => Number(b) - Number(a));
  for (const v of versions) {
    const bin = path.join(root, v, 'bin');
    if (existsSync(path.join(bin, 'initdb')) && existsSync(path.join(bin, 'postgres'))) {
      return { initdb: path.join(bin, 'initdb'), postgres: path.join(bin, 'postgres') };
    }
  }
  return undefined;
}

function isRoot(): boolean {
  return process.getuid?.() === 0;
}

function localPostgresMissing(): string | undefined {
  if (!findPostgresBins()) return 'no initdb and postgres on PATH or in /usr/lib/postgresql/*/bin';
  if (isRoot() && !accountIds('postgres')) {
    return "running as root (which PostgreSQL refuses) and there is no 'postgres' OS account to run it as";
  }
  return undefined;
}

/** Whether the account can write into dir (every parent must be searchable for it, not just dir). */
function writableBy(account: { uid: number; gid: number }, dir: string): boolean {
  return spawnSync('test', ['-w', dir], { uid: account.uid, gid: account.gid }).status === 0;
}

/** A throw-away cluster made with the machine's initdb, run as the postgres account when we are root. */
export async function startLocalPostgres(options: PostgresOptions = {}): Promise<PostgresHandle> {
  const bins = findPostgresBins();
  if (!bins) throw new Error('no initdb and postgres on PATH or in /usr/lib/postgresql/*/bin');
  const profile = options.profile ?? 'test';
  const account = isRoot() ? accountIds('postgres') : undefined;
  if (isRoot() && !account) throw new Error("running as root and there is no 'postgres' OS account");
  const owner = account ? { uid: account.uid, gid: account.gid } : {};

  // Under /tmp rather than the cache: a root-owned home is usually closed to the postgres account.
  const runsRoot = path.join(os.tmpdir(), 'shopstream-pg');
  await mkdir(runsRoot, { recursive: true, mode: 0o755 });
  sweepRuns(runsRoot);
  let runDir = options.runDir;
  if (runDir) {
    await mkdir(runDir, { recursive: true });
    if (account) chownSync(runDir, account.uid, account.gid);
    if (account && !writableBy(account, runDir)) {
      log(`${runDir} is not reachable for the postgres account; using a dir under ${runsRoot}`);
      runDir = undefined;
    }
  }
  runDir ??= await mkdtemp(path.join(runsRoot, 'run-'));
  if (account) chownSync(runDir, account.uid, account.gid);
  const dataDir = path.join(runDir, 'data');
  const logFile = path.join(runDir, 'postgres.log');
  await rm(dataDir, { recursive: true, force: true });

  const init = await runCommand(
    bins.initdb,
    ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', ...(profile === 'test' ? ['--no-sync'] : [])],
    { cwd: runDir, ...owner, timeoutMs: 120_000 },
  );
  if (init.code !== 0) throw new Error(`initdb failed (exit ${init.code}):\n${init.output.trim()}`);

  const port = await freePort(options.port);
  const tls: string[] = [];
  if (options.tls) {
    // The server refuses a key file others may read, or not its own: copied, owned by the server's account, 0600.
    for (const [from, to] of [
      [options.tls.certFile, 'server.crt'],
      [options.tls.keyFile, 'server.key'],
    ]) {
      await copyFile(from, path.join(runDir, to));
      if (account) chownSync(path.join(runDir, to), account.uid, account.gid);
      chmodSync(path.join(runDir, to), 0o600);
    }
    tls.push('ssl=on', `ssl_cert_file=${path.join(runDir, 'server.crt')}`, `ssl_key_file=${path.join(runDir, 'server.key')}`);
  }
  const settings = [
    ...tls,
    'listen_addresses=127.0.0.1',
    'max_connections=200',
    ...(profile === 'test' ? ['fsync=off', 'synchronous_commit=off', 'full_page_writes=off'] : []),
  ];
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const { child, ready: version } = await startServer({
    what: 'postgres',
    command: bins.postgres,
    args: ['-D', dataDir, '-p', String(port), '-k', runDir, ...settings.flatMap((s) => ['-c', s])],
    runDir,
    ...owner,
    detached: options.detached ?? false,
    logFile,
    marker: dataDir,
    ready: (abort) => waitForPostgres(url, { what: `local PostgreSQL on 127.0.0.1:${port}`, timeoutMs: 60_000, abort }),
    failSignal: 'SIGQUIT',
    tailLines: 40,
  });
  const finalRunDir = runDir;
  return {
    url,
    version,
    source: 'local',
    pid: child.pid,
    runDir: finalRunDir,
    stop: once(async () => {
      // SIGQUIT is PostgreSQL's immediate shutdown: right for data about to be deleted. SIGINT ("fast")
      // checkpoints first, which a development server should.
      await stopChild(child, profile === 'test' ? 'SIGQUIT' : 'SIGINT', 30_000);
      await rm(finalRunDir, { recursive: true, force: true });
    }),
  };
}

async function startPostgresContainer(client: ContainerRuntimeClient, options: PostgresOptions): Promise<PostgresHandle> {
  const { GenericContainer, Wait } = await import('testcontainers');
  const profile = options.profile ?? 'test';
  const port = options.port ? { container: 5432, host: await freePort(options.port) } : 5432;
  log(`starting ${POSTGRES_IMAGE} in Docker`);
  const container = await new GenericContainer(POSTGRES_IMAGE)
    .withEnvironment({ POSTGRES_HOST_AUTH_METHOD: 'trust' })
    .withCommand([
      'postgres',
      '-c',
      'max_connections=200',
      ...(profile === 'test' ? ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'] : []),
    ])
    .withExposedPorts(port)
    // The image's entrypoint starts a temporary server to initialise, then the real one: wait for both.
    .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
    .withStartupTimeout(180_000)
    .start();
  const url = `postgres://postgres@${client.info.containerRuntime.host}:${container.getMappedPort(5432)}/postgres`;
  const version = await waitForPostgres(url, { what: 'PostgreSQL container', timeoutMs: 60_000 });
  return {
    url,
    version,
    source: 'docker',
    containerId: container.getId(),
    stop: once(async () => {
      await container.stop();
    }),
  };
}

function databaseName(url: string): string {
  return decodeURIComponent(new URL(url).pathname.replace(/^\//, ''));
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/**
 * Makes an empty database `t_<uuid>` on the server of adminUrl and returns its URL. Inside a vitest run it
 * is tagged with the run, and the run's teardown drops it.
 */
export async function createTestDatabase(adminUrl: string): Promise<string> {
  const name = `t_${randomUUID().replaceAll('-', '')}`;
  const run = process.env[TEST_RUN_ENV];
  await withClient(adminUrl, async (client) => {
    // CREATE DATABASE fails with 55006 while another session is connected to template1, which is brief;
    // any other error is final.
    const deadline = Date.now() + 15_000;
    for (;;) {
      try {
        await client.query(`CREATE DATABASE ${quoteIdent(name)}`);
        break;
      } catch (err) {
        if ((err as { code?: string }).code !== '55006' || Date.now() > deadline) throw err;
        await delay(100);
      }
    }
    if (run && /^[A-Za-z0-9-]+$/.test(run)) {
      await client.query(`COMMENT ON DATABASE ${quoteIdent(name)} IS '${RUN_COMMENT}${run}'`);
    }
  });
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** Drops one database made by createTestDatabase, closing any connections still open to it. */
export async function dropTestDatabase(url: string): Promise<void> {
  const name = databaseName(url);
  const admin = new URL(url);
  admin.pathname = '/postgres';
  await withClient(admin.toString(), (c) => c.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)} WITH (FORCE)`));
}

/** Drops every database that createTestDatabase made during one test run. Returns how many. */
export async function dropRunDatabases(adminUrl: string, run: string): Promise<number> {
  return withClient(adminUrl, async (c) => {
    const { rows } = await c.query<{ datname: string }>(`SELECT datname FROM pg_database WHERE shobj_description(oid, 'pg_database') = $1`, [
      `${RUN_COMMENT}${run}`,
    ]);
    for (const { datname } of rows) await c.query(`DROP DATABASE IF EXISTS ${quoteIdent(datname)} WITH (FORCE)`);
    return rows.length;
  });
}
