import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Machine } from './infra.js';
import { REPO_ROOT } from './infra.js';

/** One line of a scenario's table: a figure, its baseline from the same run, and the budget it answers to. */
export interface Row {
  measure: string;
  value: number;
  unit: string;
  baseline?: { name: string; value: number };
  /** value / baseline (for throughput) as measured. */
  ratio?: number;
  budget?: { text: string; met: boolean };
}

export interface ScenarioResult {
  scenario: string;
  rows: Row[];
  /** Everything measured, raw: latency summaries, CPU use per phase, counts, EXPLAIN output. */
  details: Record<string, unknown>;
  notes: string[];
}

const fmt = (v: number | null) =>
  v === null || !Number.isFinite(v) ? String(v) : Number.isInteger(v) ? v.toLocaleString('en-US') : v.toLocaleString('en-US', { maximumFractionDigits: 2 });

export function tableOf(r: ScenarioResult): string {
  const head = ['measure', 'value', 'baseline', 'ratio', 'budget', 'met'];
  const lines = r.rows.map((x) => [
    x.measure,
    `${fmt(x.value)} ${x.unit}`,
    x.baseline ? `${fmt(x.baseline.value)} ${x.unit} (${x.baseline.name})` : '',
    x.ratio !== undefined ? x.ratio.toFixed(2) : '',
    x.budget?.text ?? '',
    x.budget ? (x.budget.met ? 'yes' : 'NO') : '',
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const row = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  return [row(head), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...lines.map(row)].join('\n');
}

export function writeResult(r: ScenarioResult, meta: { machine: Machine; options: unknown; startedAt: Date; load: unknown }): string {
  const dir = path.join(REPO_ROOT, 'bench/results');
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${r.scenario}.json`);
  writeFileSync(
    file,
    JSON.stringify(
      {
        scenario: r.scenario,
        date: meta.startedAt.toISOString(),
        finishedAt: new Date().toISOString(),
        machine: meta.machine,
        machineLoadBefore: meta.load,
        options: meta.options,
        rows: r.rows,
        notes: r.notes,
        details: r.details,
      },
      null,
      2,
    ) + '\n',
  );
  return file;
}
