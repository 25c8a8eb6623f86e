import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Root of the checkout, found from this file so it does not depend on the caller's cwd. */
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** Downloads and per-run scratch live outside the repo so a fresh clone reuses them. */
export function cacheRoot(): string {
  const base = process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache');
  return path.join(base, 'shopstream');
}

export function log(message: string): void {
  process.stderr.write(`[testkit] ${message}\n`);
}

export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Calls `attempt` until it resolves or the deadline passes. An attempt still pending at the deadline loses
 * the race too (a half-started server can accept a connection and never answer). `abort` is checked
 * between attempts so a server process that died stops the wait at once instead of at the deadline.
 */
export async function pollUntil<T>(
  what: string,
  attempt: () => Promise<T>,
  opts: { timeoutMs: number; intervalMs?: number; abort?: () => string | undefined },
): Promise<T> {
  const deadline = Date.now() + opts.timeoutMs;
  let last: unknown;
  for (;;) {
    const aborted = opts.abort?.();
    if (aborted) throw new Error(`${what}: ${aborted}`);
    let timer: NodeJS.Timeout | undefined;
    try {
      const expired = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('attempt still pending at the deadline')), Math.max(0, deadline - Date.now()));
      });
      const pending = attempt();
      pending.catch(() => undefined); // it may settle after losing the race
      return await Promise.race([pending, expired]);
    } catch (err) {
      last = err;
    } finally {
      clearTimeout(timer);
    }
    if (Date.now() >= deadline) {
      throw new Error(`${what}: not ready within ${opts.timeoutMs} ms (last error: ${errorText(last)})`);
    }
    await delay(opts.intervalMs ?? 100);
  }
}

export function errorText(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

/** Resolves an executable the way a shell would, plus extra directories the distro keeps off PATH. */
export function findExecutable(name: string, extraDirs: string[] = []): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter), ...extraDirs].filter(Boolean);
  for (const dir of dirs) {
    const candidate = path.join(dir, name);
    try {
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

export function isPortFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen({ port, host, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** The preferred port when it is free, else one the kernel picks. */
export async function freePort(preferred?: number, avoid: number[] = []): Promise<number> {
  if (preferred !== undefined && !avoid.includes(preferred) && (await isPortFree(preferred))) return preferred;
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const server = net.createServer();
      server.once('error', reject);
      server.listen({ port: 0, host: '127.0.0.1', exclusive: true }, () => {
        const address = server.address();
        server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
      });
    });
    if (port && !avoid.includes(port)) return port;
  }
}

/** True when something accepts TCP connections there; a quick check before a protocol-level one. */
export function tcpAnswers(host: string, port: number, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** Whether a process with this pid exists (signal 0): one killed but not yet reaped (a zombie) still does. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists but belongs to someone else.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Guards against signalling a recycled pid: the recorded process must still be what we started. */
export function processMatches(pid: number, marker: string): boolean {
  if (!processAlive(pid)) return false;
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').includes(marker);
  } catch {
    // No /proc (not Linux): trust the pid.
    return true;
  }
}

/** Sends `signal`, waits for the process to go, and escalates to SIGKILL after `graceMs`. */
export async function stopPid(pid: number, signal: NodeJS.Signals, graceMs: number): Promise<void> {
  try {
    process.kill(pid, signal);
  } catch {
    return;
  }
  const deadline = Date.now() + graceMs;
  while (processAlive(pid) && !isZombie(pid)) {
    if (Date.now() >= deadline) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        return;
      }
      const hardDeadline = Date.now() + 5_000;
      while (processAlive(pid) && !isZombie(pid) && Date.now() < hardDeadline) await delay(50);
      return;
    }
    await delay(50);
  }
}

function isZombie(pid: number): boolean {
  try {
    return /\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** Waits for a child we spawned (non-detached) to exit, escalating like stopPid. */
export async function stopChild(child: ChildProcess, signal: NodeJS.Signals, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

// Children of this process that must not outlive it, e.g. when vitest is killed mid-run.
const owned = new Set<ChildProcess>();
let exitHookInstalled = false;

export function own(child: ChildProcess): void {
  owned.add(child);
  child.once('exit', () => owned.delete(child));
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const c of owned) c.kill('SIGKILL');
    });
  }
}

export async function tailFile(file: string, lines = 40): Promise<string> {
  try {
    const text = await readFile(file, 'utf8');
    return text.trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return `(no log at ${file})`;
  }
}

/** A file descriptor to hand a child as stdout/stderr; the caller closes it after spawn. */
export async function openLog(file: string): Promise<number> {
  await mkdir(path.dirname(file), { recursive: true });
  // A plain fd, not a FileHandle: a FileHandle would close it again when garbage-collected.
  return openSync(file, 'a');
}

/**
 * Starts a throw-away server with its output appended to `logFile`. Unless detached it dies with this
 * process and is recorded in `runDir` for sweepRuns (`marker` must be in its command line and name this run
 * alone). `ready` gets an abort check that ends its wait at once when the server dies first; when it fails,
 * the server is stopped with `failSignal` and the error carries the last `tailLines` of the log.
 */
export async function startServer<T>(o: {
  /** Who exits, in "<what> exited (...) before it was ready". */
  what: string;
  command: string;
  args: string[];
  runDir: string;
  uid?: number;
  gid?: number;
  detached: boolean;
  logFile: string;
  marker: string;
  ready: (abort: () => string | undefined) => Promise<T>;
  failSignal: NodeJS.Signals;
  tailLines: number;
}): Promise<{ child: ChildProcess; ready: T }> {
  const fd = await openLog(o.logFile);
  const child = spawn(o.command, o.args, { cwd: o.runDir, uid: o.uid, gid: o.gid, detached: o.detached, stdio: ['ignore', fd, fd] });
  closeSync(fd);
  if (o.detached) child.unref();
  else own(child);
  if (!child.pid) throw new Error(`could not start ${o.command}`);
  if (!o.detached) writeRunRecord(o.runDir, { ownerPid: process.pid, serverPid: child.pid, marker: o.marker });

  let exit: string | undefined;
  child.once('exit', (code, signal) => {
    exit = `${o.what} exited (${signal ?? `code ${code}`}) before it was ready`;
  });
  try {
    return { child, ready: await o.ready(() => exit) };
  } catch (err) {
    await stopChild(child, o.failSignal, 5_000);
    throw new Error(`${errorText(err)}\n--- last lines of ${o.logFile} ---\n${await tailFile(o.logFile, o.tailLines)}`, { cause: err });
  }
}

/** `fn` run once: later calls get the first call's promise (a handle's stop() may be called from several places). */
export function once(fn: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | undefined;
  return () => (done ??= fn());
}

/**
 * Every throw-away server writes run.json into its run dir: which process owns it and which pid serves.
 * sweepRuns removes dirs whose owner died without cleaning up (a killed vitest) and kills their server.
 */
export interface RunRecord {
  ownerPid: number;
  serverPid?: number;
  marker: string;
}

export function writeRunRecord(dir: string, record: RunRecord): void {
  writeFileSync(path.join(dir, 'run.json'), JSON.stringify(record));
}

export function sweepRuns(root: string): void {
  if (!existsSync(root)) return;
  for (const name of readdirSync(root)) {
    const dir = path.join(root, name);
    let record: RunRecord;
    try {
      record = JSON.parse(readFileSync(path.join(dir, 'run.json'), 'utf8')) as RunRecord;
    } catch {
      continue; // being created right now, or not ours
    }
    if (processAlive(record.ownerPid)) continue;
    if (record.serverPid && processMatches(record.serverPid, record.marker)) {
      try {
        process.kill(record.serverPid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

/** uid/gid of an OS account, for running a server that refuses root. */
export function accountIds(name: string): { uid: number; gid: number } | undefined {
  const uid = spawnSync('id', ['-u', name], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) return undefined;
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** Runs a short-lived command to completion, keeping its combined output for error messages. */
export function runCommand(
  command: string,
  args: string[],
  opts: { cwd?: string; uid?: number; gid?: number; timeoutMs: number; env?: NodeJS.ProcessEnv },
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: opts.cwd,
      uid: opts.uid,
      gid: opts.gid,
      env: opts.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: opts.timeoutMs,
      killSignal: 'SIGKILL',
    });
    own(child);
    let output = '';
    const collect = (chunk: Buffer) => {
      // Keep the tail only: mvn or initdb can be chatty and only the end explains a failure.
      output = (output + chunk.toString('utf8')).slice(-20_000);
    };
    child.stdout?.on('data', collect);
    child.stderr?.on('data', collect);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      if (signal === 'SIGKILL' && code === null) output += `\n(killed after ${opts.timeoutMs} ms)`;
      resolve({ code, output });
    });
  });
}
