/**
 * The group coordinator killed under a consumer of Shopstream's @platformatic/kafka adapter: a 3-node local
 * cluster (the leader-failover scenario's failover settings), a topic of 6 partitions with 3 replicas, a
 * steady trickle of publishes; the broker that coordinates the consumer's group (the leader of the
 * __consumer_offsets partition its id hashes to) killed -9. Prints, per partition, when the first record
 * published after the kill was handled, counted from the kill (goal: within 10 s).
 * Run: cd faults && node --conditions=@shopstream/source --import tsx src/coordinatorKillCheck.ts
 */
import { createPlatformaticKafkaBus } from '@shopstream/bus';
import { createLogger } from '@shopstream/telemetry';
import { startLocalKafkaCluster } from '@shopstream/testkit';
import { Kafka, logLevel } from 'kafkajs';
import { FAILOVER_SETTINGS } from './leaderKillRounds.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const t0 = Date.now();
const log = (m: string) => console.error(`[+${((Date.now() - t0) / 1000).toFixed(1)}s] ${m}`);
const c = await startLocalKafkaCluster({ nodes: 3, settings: FAILOVER_SETTINGS });
log(`cluster on ${c.brokers.join(',')}`);
try {
  const bus = await createPlatformaticKafkaBus({
    brokers: c.brokers,
    clientId: 'coordinator-kill',
    replicationFactor: 3,
    logger: createLogger('coordinator-kill', 'info', 2),
    groupInstanceId: 'coordinator-kill@check:1',
  });
  const topic = 'events';
  const groupId = 'coordinator-kill-group';
  await bus.ensureTopics([{ topic, partitions: 6 }]);
  const handled = new Map<string, { at: number; partition: number }>();
  await bus.consume({
    groupId,
    topics: [topic],
    fromBeginning: true,
    handleBatch: async (b) => {
      for (const r of b.records) handled.set(r.value.toString(), { at: Date.now(), partition: b.partition });
    },
  });
  const sentAt = new Map<string, number>();
  let stop = false;
  const publishing = (async () => {
    for (let n = 0; !stop; n++) {
      const v = String(n);
      sentAt.set(v, Date.now());
      await bus.publish(topic, [{ key: `k${n % 12}`, value: v }]).catch(() => sentAt.delete(v));
      await sleep(20);
    }
  })();
  await sleep(8_000);

  const admin = new Kafka({ clientId: 'coordinator-kill-admin', brokers: c.brokers, logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  const offsets = (await admin.fetchTopicMetadata({ topics: ['__consumer_offsets'] })).topics[0].partitions;
  const events = (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions;
  await admin.disconnect();
  let h = 0;
  for (let i = 0; i < groupId.length; i++) h = (Math.imul(31, h) + groupId.charCodeAt(i)) | 0;
  const coordinator = offsets.find((p) => p.partitionId === (h & 0x7fffffff) % offsets.length)!.leader;
  const led = events.filter((p) => p.leader === coordinator).map((p) => p.partitionId);
  log(`${handled.size} of ${sentAt.size} handled; killing node ${coordinator}, the group coordinator, leader of partitions ${led.join(',')}`);
  const killedAt = Date.now();
  await c.kill(coordinator);
  await sleep(20_000);
  const first = new Map<number, number>();
  for (const [v, { at, partition }] of handled) {
    if ((sentAt.get(v) ?? 0) <= killedAt) continue;
    if (!first.has(partition) || at < first.get(partition)!) first.set(partition, at);
  }
  const figures = [...first]
    .sort((a, b) => a[0] - b[0])
    .map(([p, at]) => `${p}${led.includes(p) ? ' (led by it)' : ''}: ${((at - killedAt) / 1000).toFixed(1)} s`);
  log(`first record published after the kill handled, per partition: ${figures.join(', ')}`);
  stop = true;
  await publishing;
  await bus.close();
} finally {
  await c.stop();
}
