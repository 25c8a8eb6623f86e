// dist/cjs holds CommonJS under a package of "type": "module": a package.json of its own says so to Node and to
// TypeScript (its .d.ts files are then CommonJS declarations, as node16/nodenext resolution requires).
import { writeFileSync } from 'node:fs';
import path from 'node:path';

writeFileSync(path.join(import.meta.dirname, '../dist/cjs/package.json'), '{ "type": "commonjs" }\n');
