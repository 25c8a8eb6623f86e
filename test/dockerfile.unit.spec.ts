import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// No Docker engine runs here: the Dockerfile's commands were run by hand in a copy of the repository, and
// start.node24.e2e.spec.ts runs its ENTRYPOINT on a build. What stays is its shape, read from the file.
const text = readFileSync(new URL('../Dockerfile', import.meta.url), 'utf8');
const lines = text.split('\n').filter((l) => !l.startsWith('#'));
const stages = text.split(/^FROM /m).slice(1);
const runtime = stages[stages.length - 1]!;

describe('Dockerfile', () => {
  it('builds in one stage and runs from another, both on Node 24 LTS', () => {
    expect(lines.filter((l) => l.startsWith('FROM ')).map((l) => l.split(' ')[1])).toEqual(['node:24-bookworm-slim', 'node:24-bookworm-slim']);
    expect(stages[0]).toMatch(/^RUN pnpm install --frozen-lockfile$/m);
    expect(stages[0]).toMatch(/^RUN pnpm build$/m);
    expect(stages[0]).toMatch(/pnpm install --prod --frozen-lockfile/);
  });

  it('runs compiled JS as a non-root user with node itself as the command, and checks its health', () => {
    expect(runtime).not.toMatch(/pnpm|tsx|COPY (packages|services)/);
    expect(runtime).toMatch(/^USER node$/m);
    expect(runtime).toMatch(/^HEALTHCHECK .*\n?.*CMD \["node", "-e", .*\/healthz/m);
    expect(runtime).toMatch(/^ENTRYPOINT \["node", "services\/all-in-one\/dist\/main\.js"\]$/m);
  });
});
