import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { serviceNodeFlags } from '@shopstream/config';

// Every command line that starts a Shopstream process carries the same V8 flags (packages/config/src/nodeFlags.ts):
// the start scripts and the image's ENTRYPOINT here; `pnpm bench` and `pnpm faults` take them from the constant.
const repo = path.resolve(import.meta.dirname, '..');
const scriptsOf = (file: string): Record<string, string> =>
  (JSON.parse(readFileSync(path.join(repo, file), 'utf8')) as { scripts?: Record<string, string> }).scripts ?? {};

describe('the service processes V8 flags', () => {
  it('are on every start script and on the Dockerfile ENTRYPOINT', () => {
    const lines: [string, string][] = [
      ['package.json start', scriptsOf('package.json').start!],
      ['package.json cli', scriptsOf('package.json').cli!],
      ...readdirSync(path.join(repo, 'services'))
        .map((s) => [`services/${s}/package.json start`, scriptsOf(`services/${s}/package.json`).start] as [string, string | undefined])
        .filter((l): l is [string, string] => l[1] !== undefined && l[1].startsWith('node ')),
    ];
    expect(lines.length).toBeGreaterThan(5);
    const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(readFileSync(path.join(repo, 'Dockerfile'), 'utf8'))![1]!) as string[];
    lines.push(['Dockerfile ENTRYPOINT', entrypoint.join(' ')]);
    for (const [where, line] of lines) {
      // Node's own options: what comes between `node` and the script it runs.
      const args = line.split(' ');
      const script = args.findIndex((a) => /\.(ts|js)$/.test(a));
      expect(script, `${where}: ${line}`).toBeGreaterThan(0);
      expect(args.slice(1, script), `${where}: ${line}`).toEqual(expect.arrayContaining([...serviceNodeFlags]));
    }
  });

  it('are flags this Node takes, and give the young generation the room they say', () => {
    // Allocates short-lived objects fast, as a bulk request does, and reports how large the new space grew.
    const grown = `const v8 = require('node:v8'); let keep = [];
      for (let i = 0; i < 2e6; i++) { keep.push({ i, s: 'x' + i }); if (keep.length > 50000) keep = []; }
      console.log(v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size)`;
    const newSpace = (flags: readonly string[]) => Number(execFileSync(process.execPath, [...flags, '-e', grown], { encoding: 'utf8' }));
    // A misspelt flag stops node before it starts ("bad option"): execFileSync throws.
    const withFlags = newSpace(serviceNodeFlags);
    const semi = Number(/^--max-semi-space-size=(\d+)$/.exec(serviceNodeFlags.find((f) => f.startsWith('--max-semi-space-size='))!)![1]);
    // Two semi-spaces of the flag's size once the allocation rate asks for them (without the flag: half of that on
    // Node 20 and 22, the same on Node 24, whose V8 defaults to it).
    expect(withFlags).toBe(2 * semi * 1024 * 1024);
  });
});
