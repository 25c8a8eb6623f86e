import { defineConfig } from 'vitest/config';

// Workspace packages resolve to their TypeScript sources under this condition (their exports' default is the
// compiled dist/ of `pnpm build`), so tests run on sources without a build. Vite replaces its default
// conditions when given any: they are restated after ours.
const conditions = ['@shopstream/source', 'module', 'node', 'development|production'];

export default defineConfig({
  resolve: { conditions },
  ssr: { resolve: { conditions } },
  test: {
    // One real Kafka broker and one PostgreSQL server for the whole run; spec files get them via inject().
    globalSetup: ['packages/testkit/src/globalSetup.ts'],
    include: ['packages/**/src/**/*.spec.ts', 'services/**/src/**/*.spec.ts', 'test/**/*.spec.ts'],
    exclude: ['**/node_modules/**', '**/.infra/**', '**/.data/**'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Files run in parallel and keep apart through their own databases and topic prefixes. Two workers
    // on two cores: the broker and Postgres need CPU too, and more workers only queue behind them.
    pool: 'forks',
    maxWorkers: 2,
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
});
