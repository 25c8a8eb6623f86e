import { defineConfig, type ViteUserConfig } from 'vitest/config';

// Workspace packages resolve to their TypeScript sources under this condition (their exports' default is the
// compiled dist/ of `pnpm build`), so tests run on sources without a build. Vite replaces its default
// conditions when given any: they are restated after ours.
const conditions = ['@shopstream/source', 'module', 'node', 'development|production'];

/** What every lane shares, vitest.node24.config.ts included. */
export const base = {
  resolve: { conditions },
  ssr: { resolve: { conditions } },
  test: {
    exclude: ['**/node_modules/**', '**/.infra/**', '**/.data/**'],
    // Sized for a 2-core machine that other work shares (load 20 and more): a test waits for conditions,
    // never for a time, so a generous limit costs nothing when it passes.
    testTimeout: 120_000,
    hookTimeout: 240_000,
    // Files run in parallel and keep apart through their own databases and topic prefixes. Three workers on
    // two cores: most specs wait on the broker, PostgreSQL and child processes (a fresh clone's run with two
    // left the CPU 42 % idle on average, 2026-11-27), so a third file runs in that idle time.
    pool: 'forks',
    maxWorkers: 3,
    fileParallelism: true,
    // kafkajs 2 warns about its changed default partitioner on every producer: noise in every test log.
    // Many runtimes of one spec share a host and the default PORT: no instance identity for their consumers
    // (a second member of a group would rejoin as the first); the faults harness measures the rejoin.
    // Services spawned with the test process's environment post thousands of events with one key: the per-key
    // ingest limit is off unless a test sets it (test/ingestRateLimit.spec.ts does).
    env: {
      KAFKAJS_NO_PARTITIONER_WARNING: '1',
      KAFKA_GROUP_INSTANCE_ID: 'none',
      INGEST_RATE_LIMIT_PER_SECOND: '0',
      INGEST_RATE_LIMIT_PER_MINUTE: '0',
    },
  },
} satisfies ViteUserConfig;

/**
 * The fast lane (`pnpm test:unit`): tests that need no broker and no database, named `*.unit.spec.ts`. Its
 * project has no globalSetup, so it never looks for Kafka or PostgreSQL and runs where neither is reachable.
 */
const unit = ['packages/**/src/**/*.unit.spec.ts', 'services/**/src/**/*.unit.spec.ts', 'test/**/*.unit.spec.ts'];
/** Its own step in .ci/run (`pnpm test:node24`, vitest.node24.config.ts): it downloads Node 24. */
export const node24 = ['test/start.node24.e2e.spec.ts'];

export default defineConfig({
  ...base,
  test: {
    ...base.test,
    projects: [
      // Not isolated: the files share one module graph per worker, so each import is transformed and run once.
      { extends: true, test: { name: 'unit', include: unit, isolate: false } },
      {
        extends: true,
        test: {
          name: 'infra',
          include: ['packages/**/src/**/*.spec.ts', 'services/**/src/**/*.spec.ts', 'test/**/*.spec.ts'],
          exclude: [...base.test.exclude, ...unit, ...node24],
          // One real Kafka broker and one PostgreSQL server for the whole run; spec files get them via inject().
          globalSetup: ['packages/testkit/src/globalSetup.ts'],
        },
      },
    ],
  },
});
