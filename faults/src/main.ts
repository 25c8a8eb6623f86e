/**
 * `pnpm faults [scenario...] [--quick] [--seed <n>]`: runs fault scenarios (each on its own broker(s), its own
 * PostgreSQL cluster and the services as separate processes), prints a table per scenario and writes
 * faults/results/<scenario>.json with the machine, the versions and the date.
 */
import { spawnSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

// kafkajs 2 warns once per producer about its default partitioner; the services key by shop the same way.
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';
import { exitWith, failureText } from '@shopstream/testkit/measurementRun';
import { machine, tableOf, writeResult } from './report.js';
import { scenarios } from './scenarios/index.js';
import { fromSource } from './services.js';
import { writeReadme } from './readme.js';
import type { Context, Options } from './types.js';

const REPO_ROOT = path.resolve(fileURLToPath(new URL('.', import.meta.url)), '../..');
const RESULTS = path.join(REPO_ROOT, 'faults/results');

const USAGE = `usage: pnpm faults [${scenarios.map((s) => s.name).join('|')}]... [--quick] [--seed <n>]
  (no scenario: all of them, in that order)
${scenarios.map((s) => `  ${s.name.padEnd(16)} ${s.description}`).join('\n')}
  --quick       a short run of each (also FAULTS_QUICK=1)
  --seed <n>    the seed of the random moments and inputs (default: from the clock, printed)
  --readme      write the results of faults/results/*.json into faults/README.md (no scenario runs)`;

/** `Context.sized`: each size's value for --quick, or its full one. */
function sizedFor(opts: Options): Context['sized'] {
  return <K extends string>(sizes: Record<K, readonly [quick: number, full: number]>) =>
    Object.fromEntries(Object.entries<readonly [number, number]>(sizes).map(([name, [quick, full]]) => [name, opts.quick ? quick : full])) as Record<K, number>;
}

/** mulberry32: small, seedable, good enough to pick moments and inputs reproducibly. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv.filter((a) => a !== '--'),
    allowPositionals: true,
    options: { quick: { type: 'boolean' }, seed: { type: 'string' }, readme: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (values.readme) {
    writeReadme(
      path.join(REPO_ROOT, 'faults/README.md'),
      RESULTS,
      scenarios.map((s) => s.name),
    );
    console.log('faults/README.md: results written from faults/results/*.json');
    return 0;
  }
  const byName = new Map(scenarios.map((s) => [s.name, s]));
  const unknown = positionals.filter((p) => !byName.has(p));
  if (unknown.length > 0) {
    console.error(`unknown scenario ${unknown.join(', ')}\n${USAGE}`);
    return 2;
  }
  const seed = values.seed !== undefined ? Number(values.seed) : Date.now() % 2 ** 31;
  if (!Number.isInteger(seed)) {
    console.error(`--seed: not an integer: ${values.seed}`);
    return 2;
  }
  if (!fromSource) {
    // The services run as production runs them, from the compiled build: build it now (incremental, seconds).
    const t = Date.now();
    const built = spawnSync('pnpm', ['-s', 'build'], { cwd: REPO_ROOT, stdio: 'inherit' });
    if (built.status !== 0) {
      console.error('pnpm build failed (set FAULTS_FROM_SOURCE=1 to run the services from their sources)');
      return 1;
    }
    console.error(`built in ${((Date.now() - t) / 1000).toFixed(1)} s; services run from services/*/dist (FAULTS_FROM_SOURCE=1: from the sources)`);
  }
  const opts: Options = { quick: values.quick === true || process.env.FAULTS_QUICK === '1', seed };
  const m = machine();
  console.log(
    `machine: ${m.cores} cores (${m.cpuModel}), ${m.memoryGiB} GiB, Node ${m.node}; load average ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')}; seed ${seed}${opts.quick ? '; quick' : ''}`,
  );
  const chosen = positionals.length > 0 ? positionals.map((p) => byName.get(p)!) : scenarios;
  let failed = 0;
  for (const s of chosen) {
    console.log(`\n== ${s.name} ==`);
    const startedAt = new Date();
    const loadAvgBefore = os.loadavg().map((x) => Number(x.toFixed(2)));
    const cleanups: (() => Promise<void> | void)[] = [];
    const t0 = Date.now();
    const ctx: Context = {
      scenario: s.name,
      opts,
      repoRoot: REPO_ROOT,
      log: (msg) => console.error(`[${s.name} +${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`),
      random: seeded(seed),
      defer: (fn) => void cleanups.push(fn),
      sized: sizedFor(opts),
    };
    try {
      const figures = await s.run(ctx);
      console.log(tableOf(figures));
      for (const n of figures.notes) console.log(`  ${n}`);
      console.log(`  -> ${writeResult(RESULTS, s.name, figures, { machine: m, options: opts, startedAt, loadAvgBefore })}`);
      if (figures.rows.some((r) => r.goal && !r.goal.met)) failed++;
    } catch (e) {
      failed++;
      console.error(`${s.name} failed: ${failureText(e)}`);
    } finally {
      for (const fn of cleanups.reverse()) {
        try {
          await fn();
        } catch (e) {
          console.error(`${s.name}: cleanup failed: ${String(e)}`);
        }
      }
    }
  }
  return failed > 0 ? 1 : 0;
}

exitWith(main);
