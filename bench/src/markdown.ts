/**
 * `tsx bench/src/markdown.ts`: the latest bench/results/*.json as the Markdown tables of bench/README.md,
 * with each run's date and how busy the machine was while it ran.
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from './infra.js';
import type { Row } from './report.js';

const ORDER = ['ingest-bulk', 'ingest-single', 'projector', 'e2e', 'export', 'embedded'];
const dir = path.join(REPO_ROOT, 'bench/results');
const fmt = (v: number) => (Number.isInteger(v) ? v.toLocaleString('en-US') : v.toLocaleString('en-US', { maximumFractionDigits: 2 }));

/** CPU use recorded anywhere in a result's details (each measured phase records one). */
function cpuPhases(x: unknown, out: { machineBusy: number; others: number; loadAvg1m: number }[] = []) {
  if (x && typeof x === 'object') {
    const o = x as Record<string, unknown>;
    if (typeof o.machineBusy === 'number' && typeof o.others === 'number') out.push(o as never);
    else for (const v of Object.values(o)) cpuPhases(v, out);
  }
  return out;
}

const files = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort((a, b) => ORDER.indexOf(a.replace('.json', '')) - ORDER.indexOf(b.replace('.json', '')));
for (const f of files) {
  const r = JSON.parse(readFileSync(path.join(dir, f), 'utf8'));
  const phases = cpuPhases(r.details);
  const others = phases.length ? Math.max(...phases.map((p) => p.others)) : NaN;
  const load = phases.length ? Math.max(...phases.map((p) => p.loadAvg1m)) : NaN;
  console.log(`### ${r.scenario}\n`);
  console.log(
    `Run ${r.date.slice(0, 16).replace('T', ' ')} UTC, ${r.options.durationMs / 1000} s per measurement. ` +
      `Before it, with nothing of the benchmark running, other work kept ${r.machineLoadBefore.coresBusyBefore ?? '?'} of the ${r.machine.cores} cores busy (load average ${r.machineLoadBefore.loadAvg.join(' / ')}); ` +
      `during the measurements up to ${fmt(others)} cores went to processes other than the benchmark's Node processes (Kafka and Postgres included; 1-min load average up to ${fmt(load)}).\n`,
  );
  console.log('| measure | value | baseline (same run) | ratio | budget | met |\n|---|---|---|---|---|---|');
  for (const x of r.rows as Row[]) {
    console.log(
      `| ${x.measure} | ${fmt(x.value)} ${x.unit} | ${x.baseline ? `${fmt(x.baseline.value)} ${x.unit} (${x.baseline.name})` : ''} | ${x.ratio !== undefined ? x.ratio.toFixed(2) : ''} | ${x.budget?.text ?? ''} | ${x.budget ? (x.budget.met ? 'yes' : '**no**') : ''} |`,
    );
  }
  console.log('');
  for (const n of r.notes) console.log(`- ${n}`);
  console.log('');
}
