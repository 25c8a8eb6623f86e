import { AsyncLocalStorage } from 'node:async_hooks';
import { Console } from 'node:console';
import type { Readable, Writable } from 'node:stream';

/**
 * What one run of the CLI reads and writes: its configuration, its result (stdout, nothing else), and every
 * other line (stderr: errors, progress, warnings). A terminal's streams as `pnpm cli` runs, buffers in a test.
 */
export interface CliIo {
  stdout: Writable;
  stderr: Writable & { isTTY?: boolean };
  env: NodeJS.ProcessEnv;
  /** Read by `conversations import -`; the process's stdin when not given. */
  stdin?: Readable;
}

const runs = new AsyncLocalStorage<{ io: CliIo; console: Console }>();

/** The current run's io; the process's own outside a run. */
export function cliIo(): CliIo {
  return runs.getStore()?.io ?? { stdout: process.stdout, stderr: process.stderr, env: process.env, stdin: process.stdin };
}

let routed = false;

/**
 * Commands print through the global console, those of other owners too; routing its methods to the run they
 * are called in lets runs share a process (tests run the CLI in process, several at once) without passing a
 * writer through every command. Outside a run the console is untouched.
 */
function routeConsole(): void {
  if (routed) return;
  routed = true;
  for (const method of ['log', 'info', 'warn', 'error', 'debug'] as const) {
    const original = console[method].bind(console);
    console[method] = (...args: unknown[]) => {
      const run = runs.getStore();
      if (run) run.console[method](...args);
      else original(...args);
    };
  }
}

/** Runs fn with `io` as the CLI's streams and environment, for fn and everything it starts. */
export function withIo<T>(io: CliIo, fn: () => Promise<T>): Promise<T> {
  routeConsole();
  return runs.run({ io, console: new Console({ stdout: io.stdout, stderr: io.stderr, colorMode: false }) }, fn);
}
