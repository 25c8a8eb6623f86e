import { afterAll } from 'vitest';
import { Kafka, logLevel } from 'kafkajs';
import { createLogger } from '@shopstream/telemetry';
import { testInfra, uniquePrefix } from '@shopstream/testkit';
import { busConformance } from './conformance/busConformance.js';
import { createKafkaBus } from './kafka.js';

const logger = createLogger('bus-conformance', process.env.TEST_LOG_LEVEL ?? 'silent');
const prefix = uniquePrefix();
let clients = 0;
const admins: ReturnType<Kafka['admin']>[] = [];

afterAll(async () => {
  await Promise.all(admins.map((a) => a.disconnect()));
});

busConformance({
  name: 'Kafka',
  kind: 'kafka',
  features: { consumerGroupsSharePartitions: true, transactionalAppends: false },
  newBus: () => createKafkaBus({ brokers: testInfra().kafkaBrokers, clientId: `conformance-${++clients}`, replicationFactor: 1, logger }),
  unreachableBus: () => createKafkaBus({ brokers: ['127.0.0.1:1'], clientId: 'conformance-unreachable', replicationFactor: 1, logger, publishTimeoutMs: 1_000 }),
  topicName: (label) => `${prefix}${label}`,
  async waitForGroupMembers(groupId, members) {
    // Group membership is Kafka's own business, not the port's: ask the broker directly.
    const admin = new Kafka({ clientId: 'conformance-admin', brokers: testInfra().kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
    admins.push(admin);
    await admin.connect();
    const deadline = Date.now() + 30_000;
    for (;;) {
      const { groups } = await admin.describeGroups([groupId]);
      const g = groups[0];
      if (g?.state === 'Stable' && g.members.length === members && g.members.every((m) => m.memberAssignment.length > 0)) return;
      if (Date.now() > deadline) throw new Error(`group ${groupId} did not reach ${members} stable members (state ${g?.state}, ${g?.members.length} members)`);
      await new Promise((r) => setTimeout(r, 100));
    }
  },
});
