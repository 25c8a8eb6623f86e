import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase, testInfra, uniquePrefix } from '@shopstream/testkit';
import { exitOf, waitFor } from '@shopstream/harness';
import { killShopstreams, repo, spawnShopstream } from './shopstreamProcess.js';

// One service's process as `pnpm faults` and a container run it: node on its main.ts, the runner (runServices) inside.
const node = (service: string) => [process.execPath, '--conditions=@shopstream/source', '--import', 'tsx', path.join(repo, `services/${service}/src/main.ts`)];

afterAll(killShopstreams);

/** The JSON log lines a process printed. */
const logLines = (out: string) =>
  out
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { level: number; msg: string; port?: number });

describe('runServices: start-up', () => {
  it('a service whose database refuses connections logs each attempt and exits 1 after STARTUP_TIMEOUT_MS with one line naming it, no password', async () => {
    const s = spawnShopstream(node('ingest-api'), {
      DATABASE_URL: 'postgres://postgres:s3cret-pw@127.0.0.1:1/shopstream',
      KAFKA_BROKERS: testInfra().kafkaBrokers.join(','),
      STARTUP_TIMEOUT_MS: '15000',
      LOG_LEVEL: 'info',
    });
    const { code } = await exitOf(s.child, { timeoutMs: 90_000, message: 'the service exits' });
    const out = s.output();
    expect(code, out).toBe(1);
    expect(out).not.toContain('s3cret-pw');
    const lines = logLines(out);
    expect(lines.filter((l) => l.msg.startsWith('could not open PostgreSQL at 127.0.0.1:1/shopstream')).length).toBeGreaterThanOrEqual(1);
    const last = lines[lines.length - 1];
    expect(last.level).toBe(60);
    expect(last.msg).toMatch(
      /^could not start: could not reach PostgreSQL at 127\.0\.0\.1:1\/shopstream, Kafka at .* within STARTUP_TIMEOUT_MS=15000 \(.*ECONNREFUSED/,
    );
  }, 120_000);

  it('a service whose Kafka refuses connections exits 1 with a line naming it, not an uncaught stack trace', async () => {
    const s = spawnShopstream(node('activity-projector'), {
      DATABASE_URL: await createTestDatabase(testInfra().databaseUrl),
      KAFKA_BROKERS: '127.0.0.1:1',
      TOPIC_PREFIX: uniquePrefix(),
      STARTUP_TIMEOUT_MS: '15000',
      LOG_LEVEL: 'warn',
    });
    const { code } = await exitOf(s.child, { timeoutMs: 90_000, message: 'the service exits' });
    const out = s.output();
    expect(code, out).toBe(1);
    // Every line is a log line: nothing printed by Node for an uncaught error.
    expect(out.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('{'))).toEqual([]);
    const last = logLines(out).at(-1)!;
    expect(last.level).toBe(60);
    expect(last.msg).toMatch(/^could not start: could not reach PostgreSQL at .*, Kafka at 127\.0\.0\.1:1 within STARTUP_TIMEOUT_MS=15000/);
  }, 120_000);
});

describe('runServices: liveness', () => {
  it('a consumer service whose consumer cannot start keeps its HTTP port, then /healthz answers 503 naming it after CONSUMER_DEAD_AFTER_MS; SIGTERM still exits 0', async () => {
    const s = spawnShopstream(node('activity-projector'), {
      DATABASE_URL: await createTestDatabase(testInfra().databaseUrl),
      KAFKA_BROKERS: testInfra().kafkaBrokers.join(','),
      TOPIC_PREFIX: uniquePrefix(),
      KAFKA_PARTITIONS: '1',
      // Above the broker's group.max.session.timeout.ms (30 min): every join is refused (INVALID_SESSION_TIMEOUT).
      KAFKA_SESSION_TIMEOUT_MS: '2000000',
      CONSUMER_DEAD_AFTER_MS: '2000',
      LOG_LEVEL: 'info',
    });
    const port = await waitFor(
      () => {
        if (s.child.exitCode !== null) throw new Error(`exited ${s.child.exitCode}:\n${s.output()}`);
        return logLines(s.output()).find((l) => l.msg === 'listening')?.port;
      },
      { timeoutMs: 90_000, message: 'the HTTP port listening' },
    );
    const base = `http://127.0.0.1:${port}`;
    // HTTP listens before the consumer joins; the consumer's client retries its join and never gets in.
    const body = await waitFor(
      async () => {
        const res = await fetch(`${base}/healthz`);
        return res.status === 503 && ((await res.json()) as { status: string; consumers: { group: string; down_since: string }[] });
      },
      { timeoutMs: 90_000, message: '/healthz 503' },
    );
    expect(body.status).toBe('dead_consumers');
    expect(body.consumers.map((c) => c.group)).toEqual(['shopstream.activity-projector']);
    expect(Date.parse(body.consumers[0].down_since)).toBeLessThanOrEqual(Date.now() - 2_000);
    // Each failure is logged with its cause: kafkajs' consumer starts and fails its joins, @platformatic/kafka's
    // start fails inside its first join.
    expect(s.output()).toMatch(/consumer of shopstream\.activity-projector (not consuming until its client has recovered|died|failed to start)/);
    expect(s.output()).toContain('INVALID_SESSION_TIMEOUT');

    s.child.kill('SIGTERM');
    const { code } = await exitOf(s.child, { timeoutMs: 60_000, message: 'exit after SIGTERM' });
    expect(code, s.output()).toBe(0);
  }, 180_000);
});
