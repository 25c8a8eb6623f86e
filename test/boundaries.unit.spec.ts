import { fileURLToPath } from 'node:url';
import { ESLint, Linter } from 'eslint';
import { beforeAll, describe, expect, it } from 'vitest';

// The import boundaries of eslint.config.js (issue 25, item 3), as `pnpm lint` applies them: each case takes the
// rule eslint.config.js gives a file at that path and lints one import with it.
const root = fileURLToPath(new URL('..', import.meta.url));
let eslint: ESLint;
beforeAll(() => {
  eslint = new ESLint({ cwd: root });
});

async function problems(file: string, from: string): Promise<string[]> {
  const config = (await eslint.calculateConfigForFile(file)) as Linter.Config;
  const rule = config.rules?.['no-restricted-imports'];
  if (rule === undefined) return ['no boundary rule for this file'];
  const linter = new Linter({ cwd: root });
  return linter
    .verify(`import { x } from '${from}';\nexport const y = x;\n`, [{ files: ['**/*.ts'], rules: { 'no-restricted-imports': rule } }], {
      filename: `${root}/${file}`,
    })
    .map((m) => m.message);
}

describe('import boundaries (eslint.config.js)', () => {
  it.each([
    ['services/query-api/src/activities/probe.ts', '@shopstream/ingest-api', /never imports a service/],
    ['services/flow-matcher/src/probe.ts', '@shopstream/activity-projector', /never imports a service/],
    ['services/flow-matcher/src/probe.spec.ts', '@shopstream/query-api', /never imports a service/],
    ['packages/runtime/src/probe.ts', '@shopstream/all-in-one', /never imports a service/],
    ['services/all-in-one/src/probe.ts', '@shopstream/cli', /never imports a service/],
    ['packages/bus/src/probe.ts', '@shopstream/testkit', /never imports test support/],
    ['packages/projections/src/probe.ts', '@shopstream/testkit', /never imports test support/],
    ['packages/db/src/probe.ts', 'vitest', /never imports test support/],
    ['services/ingest-api/src/probe.ts', '@shopstream/harness', /never imports test support/],
    ['bench/src/probe.ts', '@shopstream/activity-projector/src/projectActivities.js', /public exports, not its files/],
    ['faults/src/probe.ts', '../../services/ingest-api/src/recordEvents.js', /by its name/],
    ['services/query-api/src/probe.ts', '../../ingest-api/src/index.js', /by its name/],
    ['packages/http/src/probe.ts', '../../../packages/db/src/db.js', /by its name/],
  ])('%s may not import %s', async (file, from, message) => {
    const found = await problems(file, from);
    expect(found).toHaveLength(1);
    expect(found[0]).toMatch(message);
  });

  it.each([
    ['services/query-api/src/activities/probe.ts', '@shopstream/contacts'],
    ['services/all-in-one/src/probe.ts', '@shopstream/ingest-api'],
    ['services/cli/src/commands/probe.ts', '@shopstream/activity-projector'],
    ['packages/bus/src/probe.spec.ts', '@shopstream/testkit'],
    ['packages/bus-conformance/src/probe.ts', '@shopstream/testkit'],
    ['services/ingest-api/src/probe.spec.ts', '@shopstream/harness'],
    ['bench/src/probe.ts', '@shopstream/testkit/cpu'],
    ['bench/src/probe.ts', '@shopstream/all-in-one'],
    ['services/query-api/src/activities/probe.ts', '../keysetPager.js'],
  ])('%s may import %s', async (file, from) => {
    expect(await problems(file, from)).toEqual([]);
  });
});
