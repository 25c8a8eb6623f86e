/**
 * `pnpm faults --readme`: writes the results of the last full run of every scenario (faults/results/<name>.json)
 * into faults/README.md, between its `<!-- results:begin -->` and `<!-- results:end -->` markers: a summary
 * (every goal met or not, per scenario), then per scenario when and where it ran, its table and its notes. The
 * README's figures are then those of the files, never typed by hand.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { tableOf } from './report.js';
import type { Figures } from './types.js';

interface Result extends Figures {
  scenario: string;
  date: string;
  machine: { cores: number; cpuModel: string; memoryGiB: number };
  versions: Record<string, string>;
  loadAvgBefore: number[];
  options: { seed: number };
  goalsMet: boolean;
}

const when = (iso: string) => `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;

export function resultsMarkdown(resultsDir: string, names: string[]): string {
  const found = names.flatMap((n) => {
    const file = path.join(resultsDir, `${n}.json`);
    return existsSync(file) ? [JSON.parse(readFileSync(file, 'utf8')) as Result] : [];
  });
  const out: string[] = [];
  out.push('| scenario | run | goals | met |', '|---|---|---|---|');
  for (const n of names) {
    const r = found.find((x) => x.scenario === n);
    if (!r) {
      out.push(`| ${n} | not run yet | | |`);
      continue;
    }
    const goals = r.rows.filter((x) => x.goal);
    const missed = goals.filter((x) => !x.goal!.met).map((x) => x.measure);
    out.push(
      `| [${n}](#${n}) | ${when(r.date)}, seed ${r.options.seed} | ${goals.length - missed.length} of ${goals.length} | ${missed.length === 0 ? 'yes' : `**NO**: ${missed.join('; ')}`} |`,
    );
  }
  for (const r of found) {
    out.push('', `### ${r.scenario}`, '');
    const versions = Object.entries(r.versions)
      .map(([k, v]) => `${k[0].toUpperCase()}${k.slice(1)} ${v}`)
      .join(', ');
    out.push(
      `Run ${when(r.date)} (\`pnpm faults ${r.scenario} --seed ${r.options.seed}\` replays it) on a shared machine with ${r.machine.cores} cores ` +
        `(${r.machine.cpuModel}, ${r.machine.memoryGiB} GiB; load average ${r.loadAvgBefore.join(' / ')} before it), ${versions}.`,
      '',
      tableOf(r),
    );
    if (r.notes.length > 0) out.push('', ...r.notes.map((n) => `- ${n}`));
  }
  return out.join('\n');
}

export function writeReadme(readme: string, resultsDir: string, names: string[]): void {
  const text = readFileSync(readme, 'utf8');
  const begin = '<!-- results:begin -->';
  const end = '<!-- results:end -->';
  const i = text.indexOf(begin);
  const j = text.indexOf(end);
  if (i < 0 || j < i) throw new Error(`${readme} has no ${begin} ... ${end} markers`);
  writeFileSync(readme, `${text.slice(0, i + begin.length)}\n${resultsMarkdown(resultsDir, names)}\n${text.slice(j)}`);
}
