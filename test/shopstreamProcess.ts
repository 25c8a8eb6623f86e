import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { waitFor } from '@shopstream/harness';

/** The checkout: the working directory of every server process a spec spawns. */
export const repo = path.resolve(import.meta.dirname, '..');

/** A server process a spec spawned, with all it has printed so far on stdout and stderr. */
export interface ShopstreamProcess {
  child: ChildProcess;
  output(): string;
}

const running = new Set<ChildProcess>();

/**
 * Runs a server's command line (`argv`) from the checkout as a user would: real HTTP on a free port of 127.0.0.1,
 * and of this process's environment nothing but PATH and HOME, then `env`. Its stdout and stderr are gathered.
 */
export function spawnShopstream(argv: string[], env: Record<string, string>): ShopstreamProcess {
  const [command, ...args] = argv as [string, ...string[]];
  const child = spawn(command, args, {
    cwd: repo,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', PORT: '0', HOST: '127.0.0.1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  child.on('exit', () => running.delete(child));
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  return { child, output: () => out };
}

/** SIGKILLs every process spawnShopstream started that has not exited yet: for a spec's afterAll. */
export function killShopstreams(): void {
  for (const c of running) c.kill('SIGKILL');
}

/** Waits for the start banner and gives the base URL it printed; fails with the output if the process exits first. */
export function startBanner(s: ShopstreamProcess): Promise<string> {
  return waitFor(
    () => {
      if (s.child.exitCode !== null) throw new Error(`${s.child.spawnargs.join(' ')} exited ${s.child.exitCode}:\n${s.output()}`);
      return /API: +(http:\/\/\S+)\/v2026-04\//.exec(s.output())?.[1];
    },
    { timeoutMs: 90_000, message: 'the start banner' },
  );
}
