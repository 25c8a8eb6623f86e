/**
 * `tsx bench/src/profileSummary.ts <file.cpuprofile> [top]`: where a V8 CPU profile (node --cpu-prof, as
 * `pnpm bench --profile` writes them) spent its time: self time by function and by package.
 */
import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

export function summarizeProfile(file: string, top = 25): string {
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  p.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (p.timeDeltas[i] ?? 0)));
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const fn = new Map<string, number>();
  const pkg = new Map<string, number>();
  for (const [id, us] of self) {
    const n = byId.get(id)!;
    const { functionName, url, lineNumber } = n.callFrame;
    const where = url
      .replace(/^file:\/\//, '')
      .replace(/.*\/node_modules\/\.pnpm\/[^/]+\/node_modules\//, '')
      .replace(/^\/work\/main\//, '');
    const key = `${functionName || '(anonymous)'} ${where ? `${where}:${lineNumber + 1}` : ''}`.trim();
    fn.set(key, (fn.get(key) ?? 0) + us);
    const group =
      functionName === '(idle)' || functionName === '(program)' || functionName === '(garbage collector)'
        ? functionName
        : !url
          ? '(native)'
          : url.startsWith('node:')
            ? 'node:' + url.slice(5).split('/')[0]
            : url.includes('/node_modules/')
              ? url
                  .replace(/.*\/node_modules\/\.pnpm\/[^/]+\/node_modules\//, '')
                  .split('/')
                  .slice(0, url.includes('/@') ? 2 : 1)
                  .join('/')
                  .replace(/^(@[^/]+\/[^/]+|[^@][^/]*).*/, '$1')
              : where.split('/').slice(0, 2).join('/');
    pkg.set(group, (pkg.get(group) ?? 0) + us);
  }
  const pct = (us: number) => `${((100 * us) / total).toFixed(1).padStart(5)}%`;
  const lines = [`${file}: ${((p.endTime - p.startTime) / 1e6).toFixed(1)} s profiled`, '', 'self time by package:'];
  for (const [k, v] of [...pkg].sort((a, b) => b[1] - a[1]).slice(0, 20)) lines.push(`  ${pct(v)}  ${k}`);
  lines.push('', 'self time by function:');
  for (const [k, v] of [...fn].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`  ${pct(v)}  ${k}`);
  return lines.join('\n');
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  const [file, top] = process.argv.slice(2);
  if (!file) {
    console.error('usage: tsx bench/src/profileSummary.ts <file.cpuprofile> [top]');
    process.exit(2);
  }
  console.log(summarizeProfile(file, Number(top ?? 25)));
}
