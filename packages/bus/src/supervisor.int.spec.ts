import { afterAll, describe, expect, it } from 'vitest';
import { Kafka, logLevel } from 'kafkajs';
import { createLogger, deadConsumers, registry, setConsumerDeadAfter } from '@shopstream/telemetry';
import { testInfra, uniquePrefix, waitFor } from '@shopstream/testkit';
import { createKafkaBus } from './kafka.js';
import type { Bus, Subscription } from './port.js';
import { superviseConsumer } from './supervisor.js';

const logger = createLogger('supervisor', process.env.TEST_LOG_LEVEL ?? 'silent');
const SESSION_MS = 6_000; // the broker's group.min.session.timeout.ms: the shortest session it takes

/** The value of a metric's series with these labels, or undefined when there is none. */
async function metric(name: string, labels: Record<string, string>): Promise<number | undefined> {
  const m = registry.getSingleMetric(name);
  if (!m) return undefined;
  const { values } = await m.get();
  return values.find((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l))?.value;
}

describe('superviseConsumer on Kafka (kafkajs)', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  });

  it('recreates a consumer its group expelled (a handler that missed its session: "not aware of this member"), which then applies again; a consumer that cannot come back is reported dead after CONSUMER_DEAD_AFTER_MS', async () => {
    const { kafkaBrokers } = testInfra();
    const bus: Bus = await createKafkaBus({
      brokers: kafkaBrokers,
      clientId: 'supervisor',
      replicationFactor: 1,
      logger,
      sessionTimeoutMs: SESSION_MS,
    });
    cleanups.push(() => bus.close());
    const prefix = uniquePrefix();
    const topic = `${prefix}supervised`;
    const groupId = `${prefix}supervised-group`;
    await bus.ensureTopics([{ topic, partitions: 1 }]);

    const seen: string[] = [];
    let blocked = false;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const sub: Subscription = await superviseConsumer(
      bus,
      {
        groupId,
        topics: [topic],
        fromBeginning: true,
        handleBatch: async (batch) => {
          for (const r of batch.records) {
            const v = r.value.toString();
            // The first time only: a handler stuck well past the session, heartbeating nothing, as a SIGSTOPped process is.
            if (v === 'slow' && !blocked) {
              blocked = true;
              await gate;
            }
            seen.push(v);
          }
        },
      },
      { logger, initialBackoffMs: 200, maxBackoffMs: 1_000 },
    );
    cleanups.push(() => sub.stop());
    expect(await metric('shopstream_consumer_up', { group: groupId })).toBe(1);

    await bus.publish(topic, [{ key: 'k', value: 'slow' }]);
    await waitFor(() => blocked, { timeoutMs: 60_000, message: 'the slow record reached the handler' });
    // The group has dropped the member once the broker reports it with no member (its session ran out).
    const admin = new Kafka({ clientId: 'supervisor-admin', brokers: kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    cleanups.push(() => admin.disconnect());
    const members = async () => (await admin.describeGroups([groupId])).groups[0]?.members.length ?? 0;
    await waitFor(async () => (await members()) === 0, { timeoutMs: 120_000, message: 'the stuck member expelled from its group' });
    release();

    // Its commit is refused; kafkajs gives up on the consumer; the supervisor makes a new one (a new member).
    await waitFor(async () => ((await metric('shopstream_consumer_restarts_total', { group: groupId })) ?? 0) >= 1, {
      timeoutMs: 120_000,
      message: 'the supervisor restarted the consumer',
    });
    await bus.publish(topic, [{ key: 'k', value: 'after' }]);
    await waitFor(() => seen.includes('after'), { timeoutMs: 120_000, message: 'the recreated consumer applied a record published after' });
    // The slow record, whose commit was refused, is delivered again: at least once, never lost.
    expect(seen.filter((v) => v === 'slow').length).toBeGreaterThanOrEqual(1);
    await waitFor(async () => (await metric('shopstream_consumer_up', { group: groupId })) === 1, { timeoutMs: 30_000, message: 'up again' });
    expect(await deadConsumers()).toEqual([]);

    // Now one that cannot come back: its topic is deleted, so the client's restarts of it all fail. Liveness
    // reports it once it has not been consuming for CONSUMER_DEAD_AFTER_MS.
    setConsumerDeadAfter(2_000);
    cleanups.push(async () => setConsumerDeadAfter(60_000));
    await admin.deleteTopics({ topics: [topic] });
    const dead = await waitFor(
      async () => {
        const d = await deadConsumers();
        return d.some((c) => c.group === groupId) && d;
      },
      { timeoutMs: 120_000, message: 'the consumer reported dead' },
    );
    expect(dead.find((c) => c.group === groupId)!.down_since).toMatch(/^\d{4}-\d\d-\d\dT/);
    expect(await metric('shopstream_consumer_up', { group: groupId })).toBe(0);

    // The topic back: the next attempt succeeds, and liveness is good again.
    await bus.ensureTopics([{ topic, partitions: 1 }]);
    await waitFor(async () => (await deadConsumers()).length === 0, { timeoutMs: 120_000, message: 'the consumer back' });
  }, 600_000);
});
