/**
 * `pnpm --filter @shopstream/client types`: writes src/contractTypes.ts, the types of the bodies the client sends
 * and receives, expanded from the zod contracts by the TypeScript checker into plain object types. So the
 * published declarations import neither `@shopstream/contracts` (private) nor `zod` (not loaded at run time):
 * the tarball installs alone. src/contractTypes.spec.ts fails when the file is not what this script writes now.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { contractTypesSource } from './contractTypesSource.js';

const file = path.resolve(import.meta.dirname, '../src/contractTypes.ts');
writeFileSync(file, await contractTypesSource());
console.log(`wrote ${path.relative(process.cwd(), file)}`);
