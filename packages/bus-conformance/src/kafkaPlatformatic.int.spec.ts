import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createLogger } from '@shopstream/telemetry';
import { testInfra } from '@shopstream/testkit';
import { kafkaAdapterSuite } from './kafkaAdapterSuite.js';
import { createPlatformaticKafkaBus } from '@shopstream/bus';

kafkaAdapterSuite('Kafka (@platformatic/kafka)', createPlatformaticKafkaBus);

describe('Kafka (@platformatic/kafka) adapter: static membership', () => {
  it("takes a killed member's place at once with its group.instance.id, long before the dead one's session would have run out", async () => {
    const logger = createLogger('bus-static', process.env.TEST_LOG_LEVEL ?? 'silent');
    const brokers = testInfra().kafkaBrokers;
    const topic = `static-${randomUUID()}`;
    const group = `g-static-${randomUUID()}`;
    // Long, so that joining as a new member (held until the dead member's session ran out) cannot pass, and
    // longer than a loaded machine takes to start a consumer and join: the test compares with it, not with a speed.
    const sessionTimeoutMs = 90_000;
    const bus = await createPlatformaticKafkaBus({
      brokers,
      clientId: 'static',
      replicationFactor: 1,
      logger,
      sessionTimeoutMs,
      groupInstanceId: 'static-instance-1',
    });
    const cleanups: (() => Promise<unknown>)[] = [() => bus.close()];
    try {
      await bus.ensureTopics([{ topic, partitions: 2 }]);
      const child = spawn(
        process.execPath,
        ['--conditions=@shopstream/source', '--import', 'tsx', fileURLToPath(new URL('./staticMemberChild.ts', import.meta.url))],
        {
          env: {
            ...process.env,
            KAFKA_BROKERS: brokers.join(','),
            TOPIC: topic,
            GROUP: group,
            GROUP_INSTANCE_ID: 'static-instance-1',
            SESSION_TIMEOUT_MS: String(sessionTimeoutMs),
          },
          stdio: ['ignore', 'pipe', 'inherit'],
        },
      );
      cleanups.push(async () => child.kill('SIGKILL'));
      let out = '';
      child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      await bus.publish(topic, [
        { key: 'a', value: 'before-a' },
        { key: 'b', value: 'before-b' },
      ]);
      const until = async (what: string, fn: () => boolean, ms: number) => {
        const deadline = Date.now() + ms;
        while (!fn()) {
          if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
          await new Promise((r) => setTimeout(r, 50));
        }
      };
      await until('the child consumed both records', () => out.includes('before-a') && out.includes('before-b'), 60_000);
      // Committed before the kill, or the records would rightly come again.
      const committedBy = Date.now() + 60_000;
      while ((await bus.lag(group, [topic])).some((l) => l.lag > 0)) {
        if (Date.now() > committedBy) throw new Error('the child committed both records: not within 60000 ms');
        await new Promise((r) => setTimeout(r, 100));
      }
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));

      const seen: string[] = [];
      const killedAt = Date.now();
      const sub = await bus.consume({
        groupId: group,
        topics: [topic],
        handleBatch: async (batch) => {
          for (const r of batch.records) seen.push(r.value.toString());
        },
      });
      cleanups.push(() => sub.stop());
      await bus.publish(topic, [
        { key: 'a', value: 'after-a' },
        { key: 'b', value: 'after-b' },
      ]);
      await until('the records after the kill consumed', () => seen.includes('after-a') && seen.includes('after-b'), sessionTimeoutMs - 10_000);
      expect(Date.now() - killedAt).toBeLessThan(sessionTimeoutMs);
      // The child committed what it handled: nothing comes twice.
      expect(seen.sort()).toEqual(['after-a', 'after-b']);
    } finally {
      for (const c of cleanups.reverse()) await c().catch(() => undefined);
    }
  }, 300_000);
});
