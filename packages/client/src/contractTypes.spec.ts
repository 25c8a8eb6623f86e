import { readFileSync } from 'node:fs';
import path from 'node:path';
import { expect, it } from 'vitest';
import { contractTypesSource } from '../scripts/contractTypesSource.js';

// In the full lane, not the unit one: it type-checks the contracts (10 to 30 s on a busy machine).
// The published declarations carry the contract types expanded (the contracts package is private): they must be
// what the contracts say today. On a failure run `pnpm --filter @shopstream/client types` and commit the file.
it('src/contractTypes.ts is what the zod contracts give now', async () => {
  const committed = readFileSync(path.resolve(import.meta.dirname, 'contractTypes.ts'), 'utf8');
  expect(await contractTypesSource()).toBe(committed);
}, 180_000);
