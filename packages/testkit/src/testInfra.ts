import { inject } from 'vitest';

declare module 'vitest' {
  interface ProvidedContext {
    kafkaBrokers: string[];
    databaseUrl: string;
  }
}

/**
 * The Kafka brokers and the admin database URL that the run's globalSetup started or found, as seen from
 * inside a test file. Spec files use these instead of starting servers of their own.
 */
export function testInfra(): { kafkaBrokers: string[]; databaseUrl: string } {
  const kafkaBrokers = inject('kafkaBrokers');
  const databaseUrl = inject('databaseUrl');
  if (!kafkaBrokers?.length || !databaseUrl) {
    throw new Error(
      'testInfra(): nothing was provided. Run the tests through the root vitest.config.ts, whose globalSetup ' +
        "is '@shopstream/testkit/globalSetup' (packages/testkit/src/globalSetup.ts).",
    );
  }
  return { kafkaBrokers, databaseUrl };
}
