import { randomUUID } from 'node:crypto';
import type { TestProject } from 'vitest/node';
import { ensureKafka, type KafkaHandle } from './kafka.js';
import { dropRunDatabases, ensurePostgres, TEST_RUN_ENV, type PostgresHandle } from './postgres.js';
import { errorText, log } from './proc.js';
// Type-only: brings the ProvidedContext keys into scope without loading vitest's runtime here.
import type {} from './testInfra.js';

/**
 * Finds or starts one Kafka broker and one PostgreSQL server for the whole vitest run and hands their
 * addresses to every test file through provide()/inject(). The teardown stops what this run started and
 * drops the databases its tests created on a server it did not start.
 */
export default async function setup({ provide }: TestProject): Promise<() => Promise<void>> {
  const run = randomUUID();
  // Set before vitest forks its workers, which inherit it: createTestDatabase tags databases with it.
  process.env[TEST_RUN_ENV] = run;
  const started = Date.now();
  // Started side by side: the JVM and initdb each spend most of their start waiting on one core.
  const [kafka, postgres] = await Promise.allSettled([ensureKafka(), ensurePostgres()]);
  if (kafka.status === 'rejected' || postgres.status === 'rejected') {
    await Promise.allSettled([
      kafka.status === 'fulfilled' ? kafka.value.stop() : undefined,
      postgres.status === 'fulfilled' ? postgres.value.stop() : undefined,
    ]);
    const reasons = [kafka, postgres].flatMap((r) => (r.status === 'rejected' ? [errorText(r.reason)] : []));
    throw new Error(reasons.join('\n\n'));
  }
  const k: KafkaHandle = kafka.value;
  const p: PostgresHandle = postgres.value;
  log(
    `Kafka ${k.version} (${k.source}) at ${k.brokers.join(',')}; PostgreSQL ${p.version.split(' ')[0]} (${p.source}) ` +
      `at ${p.url}; ready in ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
  provide('kafkaBrokers', k.brokers);
  provide('databaseUrl', p.url);

  return async () => {
    // A server this run started is deleted whole; on someone else's, remove only this run's databases.
    if ((p.source === 'existing' || p.source === 'env') && process.env.SHOPSTREAM_KEEP_TEST_DATABASES !== '1') {
      try {
        await dropRunDatabases(p.url, run);
      } catch (err) {
        log(`could not drop this run's test databases: ${errorText(err)}`);
      }
    }
    await Promise.all([k.stop(), p.stop()]);
  };
}
