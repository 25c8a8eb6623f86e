/**
 * `pnpm schemas`: writes packages/contracts/schemas/<name>.json, one JSON Schema per topic contract, from the
 * zod contracts. Refuses to overwrite a file with a change that breaks its consumers (a field removed, renamed
 * or narrowed): publish a new version of the contract instead (docs/versioning.md).
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { compatibilityBreaks, contractJsonSchema, topicContracts } from '../src/topicContracts.js';

const dir = path.resolve(import.meta.dirname, '../schemas');
let failed = false;
for (const name of Object.keys(topicContracts)) {
  const file = path.join(dir, `${name}.json`);
  const next = contractJsonSchema(name);
  const text = `${JSON.stringify(next, null, 2)}\n`;
  if (existsSync(file)) {
    const breaks = compatibilityBreaks(JSON.parse(readFileSync(file, 'utf8')), next);
    if (breaks.length > 0) {
      failed = true;
      console.error(`${name}: not written, the change breaks consumers of this version:\n  ${breaks.join('\n  ')}`);
      continue;
    }
    if (readFileSync(file, 'utf8') === text) continue;
  }
  writeFileSync(file, text);
  console.log(`wrote ${path.relative(process.cwd(), file)}`);
}
process.exit(failed ? 1 : 0);
