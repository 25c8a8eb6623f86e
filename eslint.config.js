// @ts-check
/**
 * `pnpm lint` runs this (and knip). typescript-eslint's recommended rules on every .ts file, plus the few
 * type-aware rules that catch what this code base is most exposed to: a promise nobody awaits or catches (a
 * lost send, an unhandled rejection that kills the process), an async function where a callback's result is
 * ignored (express 5 handlers excepted: express awaits them). Formatting is Prettier's business (`pnpm format`),
 * not a lint rule.
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * Boundaries (issue 25, item 3). A service imports packages, never a sibling service: only the composers
 * (all-in-one, cli) put service declarations together. Product code (a package's or a service's non-spec
 * sources) never imports test support. bench/ and faults/ import what a package exports, never its files. No
 * source reaches into another package by a relative path. `no-restricted-imports` sees static imports and
 * `import type`; each file gets one rule value below (ESLint does not merge a rule's options across blocks).
 */
const dirs = (d) =>
  readdirSync(path.join(import.meta.dirname, d), { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name);
const composers = ['all-in-one', 'cli'];
const services = dirs('services');
const testSupport = ['testkit', 'harness', 'bus-conformance'];
const pkg = (name) => [`@shopstream/${name}`, `@shopstream/${name}/*`];
const serviceImports = (except = []) => ({
  group: services.filter((s) => !except.includes(s)).flatMap(pkg),
  message: 'A service or package never imports a service: move what is shared into a package (only all-in-one and cli compose services).',
});
const testSupportImports = {
  group: [...testSupport.flatMap(pkg), 'vitest', 'vitest/*'],
  message: 'Product code never imports test support: keep it in a spec file or a test-support package (testkit, harness, bus-conformance).',
};
const deepImports = {
  group: ['@shopstream/*/src', '@shopstream/*/src/**', '@shopstream/*/dist', '@shopstream/*/dist/**'],
  message: "Import a package's public exports, not its files.",
};
const escapes = {
  regex: `^(\\.\\./){2,}((services|packages)/)?(${[...services, ...dirs('packages'), 'bench', 'faults', 'test'].join('|')})/`,
  message: 'Import another package by its name (@shopstream/...), never by a relative path into it.',
};
const restrict = (...patterns) => ({ 'no-restricted-imports': ['error', { patterns: [deepImports, escapes, ...patterns] }] });
const specs = ['**/*.spec.ts'];
const testSupportFiles = testSupport.map((p) => `packages/${p}/**`);
const serviceSrc = (names, ext = '.ts') => names.map((s) => `services/${s}/src/**/*${ext}`);
const leaves = services.filter((s) => !composers.includes(s));
const boundaries = [
  { files: serviceSrc(leaves), ignores: specs, rules: restrict(serviceImports(), testSupportImports) },
  { files: serviceSrc(leaves, '.spec.ts'), rules: restrict(serviceImports()) },
  // The CLI takes the list of services (and so its projections) from the all-in-one's declaration; never the reverse.
  { files: serviceSrc(['all-in-one']), ignores: specs, rules: restrict(serviceImports(leaves), testSupportImports) },
  { files: serviceSrc(['all-in-one'], '.spec.ts'), rules: restrict(serviceImports(leaves)) },
  { files: serviceSrc(['cli']), ignores: specs, rules: restrict(serviceImports([...leaves, 'all-in-one']), testSupportImports) },
  { files: serviceSrc(['cli'], '.spec.ts'), rules: restrict(serviceImports([...leaves, 'all-in-one'])) },
  {
    files: ['packages/*/src/**/*.ts', 'packages/*/scripts/**/*.ts'],
    ignores: [...specs, ...testSupportFiles],
    rules: restrict(serviceImports(), testSupportImports),
  },
  { files: ['packages/*/src/**/*.spec.ts', ...testSupportFiles], rules: restrict(serviceImports()) },
  { files: ['bench/**/*.ts', 'faults/**/*.ts'], rules: restrict() },
];

export default tseslint.config(
  {
    ignores: [
      '**/dist/**',
      '**/node_modules/**',
      '**/.infra/**',
      '**/.data/**',
      'docs/**',
      'packages/contracts/schemas/**',
      'bench/results/**',
      'faults/results/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false, attributes: false } }],
      '@typescript-eslint/await-thenable': 'error',
      // `_name` marks what is left unused on purpose: a parameter express's arity needs, a field taken out of a rest.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none', ignoreRestSiblings: true }],
      // `ok && n++` is a common, readable idiom here; a bare expression that does nothing is still an error.
      '@typescript-eslint/no-unused-expressions': ['error', { allowShortCircuit: true, allowTernary: true }],
      // Off: it reports `let status = 'timeout'; try { status = ... } catch {}`, where the first value is the answer
      // when the try throws (the faults and bench harnesses do this a dozen times); the type checker finds real dead stores.
      'no-useless-assignment': 'off',
      // Off: matching NUL and other control characters is deliberate here (PostgreSQL refuses \u0000 in text and jsonb).
      'no-control-regex': 'off',
      // A `let` that a callback reads before its one assignment (a handle stopped on cleanup) cannot be a const.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  {
    // Production code says what a value is; tests, benchmarks and fault drills read JSON bodies whose shape the
    // assertion itself checks, and `any` there is the honest type.
    files: ['**/*.spec.ts', 'test/**', 'bench/**', 'faults/**', 'packages/testkit/**', 'packages/harness/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // Production code: a warning until the database rows are typed (issue 14, item 5: `Queryable.query()` returns
    // `any[]` and the stores map rows by hand); then an error.
    files: ['packages/*/src/**/*.ts', 'services/*/src/**/*.ts'],
    ignores: ['**/*.spec.ts', 'packages/testkit/**', 'packages/harness/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'warn' },
  },
  ...boundaries,
);
