import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '@shopstream/telemetry';
import { processAlive, startLocalKafka, type KafkaHandle } from '@shopstream/testkit';
import { createKafkaBus } from './kafka.js';
import { createPlatformaticKafkaBus } from './kafkaPlatformatic.js';
import type { Bus, Subscription } from './port.js';

const logger = createLogger('bus-rejoin', process.env.TEST_LOG_LEVEL ?? 'silent');
const until = async (what: string, fn: () => boolean | Promise<boolean>, timeoutMs: number) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
};

const adapters = [
  // No static membership and no member id to give (public API only): kafkajs restarts its consumer during the
  // outage and the new member's join waits out the old member's session (docs/operations.md#kafka-client). Its
  // session is the broker's least (group.min.session.timeout.ms, 6 s) and a little: this case asks only that it comes back.
  { name: 'kafkajs', create: createKafkaBus, sessionMs: 8_000, resumesWithinMs: 8_000 + 30_000 },
  // Keeps its member id through the outage (it does not restart its consumer) and heartbeats until the broker is back.
  // The session is long (2 minutes) so that a join held until the old session ran out cannot pass for a rejoin, and
  // the bound (90 s) leaves a busy machine 30 times the few seconds a rejoin takes: no race against its speed.
  { name: '@platformatic/kafka', create: createPlatformaticKafkaBus, sessionMs: 120_000, resumesWithinMs: 90_000 },
];

// A broker of its own (it is killed), so not the shared one of the other specs.
describe.each(adapters)('Kafka adapter ($name) after a broker outage', ({ create, sessionMs, resumesWithinMs }) => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  });

  it('consumes again once the broker is back (@platformatic/kafka: as the member it was, long before the old session would have run out)', async () => {
    const first: KafkaHandle = await startLocalKafka({});
    cleanups.push(() => first.stop());
    const bus: Bus = await create({
      brokers: first.brokers,
      clientId: 'rejoin',
      replicationFactor: 1,
      logger,
      publishTimeoutMs: 2_000,
      // Long, so that joining as a new member (held until the old member's session ran out) cannot pass as a rejoin.
      sessionTimeoutMs: sessionMs,
    });
    cleanups.push(() => bus.close());
    const topic = 'rejoin-events';
    await bus.ensureTopics([{ topic, partitions: 1 }]);
    const seen: string[] = [];
    const sub: Subscription = await bus.consume({
      groupId: 'rejoin-group',
      topics: [topic],
      fromBeginning: true,
      handleBatch: async (batch) => {
        for (const r of batch.records) seen.push(r.value.toString());
      },
    });
    cleanups.push(() => sub.stop());
    await bus.publish(topic, [{ key: 'k', value: 'before' }]);
    await until('the record before the outage consumed', () => seen.includes('before'), 30_000);

    process.kill(first.pid!, 'SIGKILL');
    await until('the broker gone', () => !processAlive(first.pid!), 10_000);
    // Long enough for kafkajs's consumer to fail its retries and be restarted (without a member id). Not a race: on
    // a slower machine the outage is as long, and either way the consumer must come back.
    await new Promise((r) => setTimeout(r, 6_000));
    const second = await startLocalKafka({
      runDir: first.runDir,
      port: Number(first.brokers[0].split(':').pop()),
      controllerPort: first.controllerPort,
      reuseData: true,
    });
    cleanups.push(() => second.stop());
    const back = Date.now();
    await until(
      'a record published after the outage',
      () =>
        bus.publish(topic, [{ key: 'k', value: 'after' }]).then(
          () => true,
          () => false,
        ),
      30_000,
    );
    await until('the record after the outage consumed', () => seen.includes('after'), resumesWithinMs + 10_000);
    const resumedMs = Date.now() - back;
    // Joining as a new member waits out the old one's session; rejoining as it takes a round trip or two.
    expect(resumedMs).toBeLessThan(resumesWithinMs);
  }, 240_000);
});
