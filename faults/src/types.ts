/**
 * What a fault scenario is. A scenario starts what it breaks on its own (its own broker or brokers, its own
 * PostgreSQL cluster, the services as separate processes, the load from another process), injects its faults,
 * and answers with figures that can be written as JSON. Adding one: a module in scenarios/ exporting a
 * `Scenario`, and a line in scenarios/index.ts.
 */

/** One line of the scenario's table in faults/README.md: a figure and, when there is one, its goal. */
export interface Row {
  measure: string;
  value: number | string;
  unit?: string;
  /** The goal the figure answers to (issue 15: 0 lost, 0 doubled, 0 5xx, ingest back within 5 s ...). */
  goal?: { text: string; met: boolean };
}

/** What `run` answers: JSON-able throughout (it is written as is to faults/results/<scenario>.json). */
export interface Figures {
  rows: Row[];
  /** Everything measured, raw: counts by status, recovery times per fault, timestamps. */
  details: Record<string, unknown>;
  /** Sentences printed under the table (what was loaded, what was injected, anything odd). */
  notes: string[];
  /** Versions of what the scenario ran on (e.g. { kafka: '4.3.1', postgres: '17.6' }), beside Node's. */
  versions?: Record<string, string>;
}

export interface Options {
  /** `--quick` or FAULTS_QUICK=1: a short run of each scenario (fewer events, fewer and shorter faults). */
  quick: boolean;
  /** `--seed <n>`: the random moments and inputs of a run, so a failure can be replayed. */
  seed: number;
}

export interface Context {
  scenario: string;
  opts: Options;
  /** The repository's root (services are started from there). */
  repoRoot: string;
  /** A progress line on stderr, prefixed with the scenario's name and the seconds since it started. */
  log(message: string): void;
  /** A deterministic random number in [0, 1) from the run's seed. */
  random(): number;
  /**
   * Something to undo when the scenario ends, however it ends (stop a broker, a database, a process):
   * run last-registered first, after `run` returns or throws.
   */
  defer(cleanup: () => Promise<void> | void): void;
  /**
   * The run's sizes, each given as [with --quick, otherwise], side by side:
   * `const { rate, outageMs } = ctx.sized({ rate: [100, 200], outageMs: [8_000, 15_000] })`.
   */
  sized<K extends string>(sizes: Record<K, readonly [quick: number, full: number]>): Record<K, number>;
}

export interface Scenario {
  /** The name on the command line and of the result file: `pnpm faults <name>`. */
  name: string;
  /** One line: the fault and what is checked. */
  description: string;
  run(ctx: Context): Promise<Figures>;
}
