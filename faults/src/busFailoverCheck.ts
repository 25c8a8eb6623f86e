/**
 * The check of the fix for what faults/src/kafkajsRetryLoss.ts reproduces, through Shopstream's own Kafka
 * adapter: concurrent publishes (micro-batched into sends across 3 partitions led by 3 nodes of a local
 * cluster), the leader of partition 0 killed -9 mid-stream; then every record a publish acknowledged is looked
 * for in the log. Prints lostAcked (0 expected) and how many records the adapter had to send again because
 * kafkajs answered a send without their partition (shopstream_kafka_records_resent_total).
 * Run: cd faults && node --conditions=@shopstream/source --import tsx src/busFailoverCheck.ts [rounds]
 */
import { randomUUID } from 'node:crypto';
import { createKafkaBus } from '@shopstream/bus';
import { createLogger, registry } from '@shopstream/telemetry';
import { startLocalKafkaCluster } from '@shopstream/testkit';
import { Kafka, logLevel } from 'kafkajs';
import { createReplicatedTopic, FAILOVER_SETTINGS, killPartition0LeaderMidStream, valuesInLog } from './leaderKillRounds.js';

const rounds = Number(process.argv[2] ?? 3);
const c = await startLocalKafkaCluster({ nodes: 3, settings: FAILOVER_SETTINGS });
let totalLost = 0;
try {
  const kafka = new Kafka({ clientId: 'check', brokers: c.brokers, logLevel: logLevel.NOTHING, connectionTimeout: 3_000, requestTimeout: 5_000 });
  const admin = kafka.admin();
  await admin.connect();
  for (let round = 1; round <= rounds; round++) {
    const topic = `r${round}`;
    const leaders = await createReplicatedTopic(admin, topic);
    const bus = await createKafkaBus({
      brokers: c.brokers,
      clientId: `check-${round}`,
      replicationFactor: 3,
      logger: createLogger('check', 'error', 2),
      publishTimeoutMs: 10_000,
    });
    const acked = new Set<string>();
    let n = 0;
    let failed = 0;
    let stop = false;
    const publisher = async () => {
      while (!stop) {
        const value = String(n++);
        try {
          await bus.publish(topic, [{ key: randomUUID(), value }]);
          acked.add(value);
        } catch {
          failed++;
        }
      }
    };
    const loops = Array.from({ length: 24 }, publisher);
    const victim = await killPartition0LeaderMidStream(c, leaders);
    stop = true;
    await Promise.all(loops);
    await bus.close();
    const { seen } = await valuesInLog(kafka, admin, topic, `check-read-${round}`);
    const lost = [...acked].filter((v) => !seen.has(v));
    totalLost += lost.length;
    const resent = (await registry.getSingleMetric('shopstream_kafka_records_resent_total')?.get())?.values[0]?.value ?? 0;
    console.log(
      JSON.stringify({
        round,
        killed: victim,
        sent: n,
        acked: acked.size,
        failedPublishes: failed,
        inLog: seen.size,
        lostAcked: lost.length,
        resentSoFar: resent,
      }),
    );
    await c.restart(victim);
  }
  await admin.disconnect();
} finally {
  await c.stop();
}
process.exit(totalLost === 0 ? 0 : 1);
