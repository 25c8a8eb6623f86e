import os from 'node:os';

/**
 * What the measuring commands (`pnpm bench`, `pnpm faults`) share about a run: the machine it ran on, written
 * beside the figures, and how their entry point ends.
 */

/** The machine a run measured on; each command adds what it knows besides (versions, the OS's name). */
export interface HostFigures {
  cores: number;
  cpuModel: string;
  memoryGiB: number;
  node: string;
}

export function hostFigures(): HostFigures {
  const cpus = os.cpus();
  return {
    cores: cpus.length,
    cpuModel: cpus[0]?.model ?? 'unknown',
    memoryGiB: Number((os.totalmem() / 2 ** 30).toFixed(1)),
    node: process.version,
  };
}

/** An error as a run's log shows it: its stack when it has one. */
export const failureText = (e: unknown): string => (e instanceof Error ? (e.stack ?? e.message) : String(e));

/** Runs a command's `main` on its arguments and exits with the code it answers, or 1 (the failure on stderr) if it throws. */
export function exitWith(main: (argv: string[]) => Promise<number>): void {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      console.error(failureText(e));
      process.exit(1);
    },
  );
}
