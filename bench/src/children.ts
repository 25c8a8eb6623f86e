import { fork, type ChildProcess } from 'node:child_process';
import { mkdirSync, openSync, closeSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { REPO_ROOT } from './infra.js';
import { failureText } from '@shopstream/testkit/measurementRun';

export interface Child {
  name: string;
  pid: number;
  process: ChildProcess;
  /** The first message of `type` from the child (after the ones already received). */
  next<T = any>(type: string, timeoutMs?: number): Promise<T>;
  send(msg: unknown): void;
  /** Asks the child to stop (message `stop`), waits for its exit, kills it after timeoutMs. */
  stop(timeoutMs?: number): Promise<void>;
  logFile: string;
}

export interface SpawnOptions {
  env?: Record<string, string | undefined>;
  /** Directory for a V8 CPU profile of the child (`--cpu-prof`), written when it exits. */
  cpuProfDir?: string;
  args?: string[];
  /** Stopped by SIGTERM, not by the `stop` message: `pnpm start` (main.ts) drains on a signal and ignores messages. */
  stopBySignal?: boolean;
}

const here = path.dirname(fileURLToPath(import.meta.url));

/**
 * Starts one of bench/src's process entries (serverProcess.ts, loadProcess.ts) as its own Node process with
 * an IPC channel, so the load never shares an event loop with the server it measures.
 */
export function spawnChild(name: string, entry: string, opts: SpawnOptions = {}): Child {
  const logDir = path.join(os.tmpdir(), 'shopstream-bench');
  mkdirSync(logDir, { recursive: true });
  const logFile = path.join(logDir, `${name}-${process.pid}-${Date.now()}.log`);
  const fd = openSync(logFile, 'a');
  // Sources, as `pnpm start` runs them (the workspace packages' exports default to their built dist/).
  const execArgv = ['--conditions=@shopstream/source', '--import', 'tsx'];
  if (opts.cpuProfDir) {
    // One directory per process: tsx's loader thread writes a profile of its own beside the main thread's.
    const dir = path.join(opts.cpuProfDir, `${name}-${Date.now()}`);
    mkdirSync(dir, { recursive: true });
    execArgv.push('--cpu-prof', `--cpu-prof-dir=${dir}`);
  }
  const child = fork(path.join(here, entry), opts.args ?? [], {
    cwd: REPO_ROOT,
    execArgv,
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', fd, fd, 'ipc'],
  });
  closeSync(fd);
  const inbox: any[] = [];
  const waiters: { type: string; resolve: (m: any) => void; reject: (e: Error) => void }[] = [];
  let exited: string | null = null;
  const deliver = () => {
    for (let i = 0; i < waiters.length; i++) {
      const w = waiters[i];
      const at = inbox.findIndex((m) => m.type === w.type || m.type === 'error');
      if (at < 0) continue;
      const [m] = inbox.splice(at, 1);
      waiters.splice(i--, 1);
      if (m.type === 'error' && w.type !== 'error') w.reject(new Error(`${name}: ${m.message}\n(log: ${logFile})`));
      else w.resolve(m);
    }
  };
  child.on('message', (m: any) => {
    inbox.push(m);
    deliver();
  });
  const exitPromise = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      exited = `${name} exited (${signal ?? `code ${code}`})`;
      for (const w of waiters.splice(0)) w.reject(new Error(`${exited} before sending '${w.type}'.\n--- ${logFile} ---\n${tail(logFile)}`));
      resolve();
    }),
  );
  return {
    name,
    pid: child.pid!,
    process: child,
    logFile,
    next(type, timeoutMs = 120_000) {
      return new Promise((resolve, reject) => {
        if (exited) return reject(new Error(`${exited}.\n--- ${logFile} ---\n${tail(logFile)}`));
        const timer = setTimeout(() => reject(new Error(`${name}: no '${type}' within ${timeoutMs} ms (log: ${logFile})`)), timeoutMs);
        waiters.push({
          type,
          resolve: (m) => (clearTimeout(timer), resolve(m)),
          reject: (e) => (clearTimeout(timer), reject(e)),
        });
        deliver();
      });
    },
    send(msg) {
      child.send(msg as any);
    },
    async stop(timeoutMs = 30_000) {
      if (exited) return;
      if (opts.stopBySignal) child.kill('SIGTERM');
      // A child that is exiting on its own may have closed its channel since `connected` was read: the send's EPIPE
      // goes to the callback (without one it is an 'error' event, which would end the bench), and the exit is awaited.
      else if (child.connected) child.send({ type: 'stop' }, () => {});
      const killer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      await exitPromise;
      clearTimeout(killer);
    },
  };
}

function tail(file: string, lines = 40): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** For a child entry: report a failure to the parent and exit. */
export function failChild(e: unknown): never {
  const message = failureText(e);
  console.error(message);
  process.send?.({ type: 'error', message }, () => process.exit(1));
  setTimeout(() => process.exit(1), 1_000);
  throw e;
}
