/**
 * Thrown when none of the three ways to get a server works. It names all three with why each failed,
 * so whoever reads a red CI log knows what to set up without reading testkit's code.
 */
export class InfraUnavailableError extends Error {
  constructor(what: 'Kafka' | 'PostgreSQL', reasons: { env: string; docker: string; local: string }, fix: string) {
    super(
      [
        `No ${what} for the tests. @shopstream/testkit tries three ways, in order, and none worked:`,
        `  1. environment: ${reasons.env}`,
        `  2. Docker engine (testcontainers): ${reasons.docker}`,
        `  3. local programs: ${reasons.local}`,
        `Fix one of them: ${fix}`,
      ].join('\n'),
    );
    this.name = 'InfraUnavailableError';
  }
}
