/**
 * A reproduction, with kafkajs alone (no Shopstream code), of the loss `pnpm faults leader-failover` found:
 * an idempotent producer's sendBatch (acks=-1) over 3 partitions led by 3 nodes of a local cluster, in a
 * loop; the leader of partition 0 killed -9 mid-stream. kafkajs 2.2.4's sendMessages keeps, across retries,
 * the responses of brokers that already answered and retries only the others; when partition 0 moves to a
 * broker that answered for its own partition in the same sendBatch, its records are never sent again and
 * sendBatch resolves: acknowledged, not written (tulios/kafkajs#1303, fix proposed in #1798).
 * Run: cd faults && node --conditions=@shopstream/source --import tsx src/kafkajsRetryLoss.ts
 * (prints lostAcked: records sendBatch acknowledged that the log does not hold; 0 when fixed).
 */
import { startLocalKafkaCluster } from '@shopstream/testkit';
import { Kafka, logLevel } from 'kafkajs';
import { createReplicatedTopic, FAILOVER_SETTINGS, killPartition0LeaderMidStream, leadersOf, valuesInLog } from './leaderKillRounds.js';

const c = await startLocalKafkaCluster({ nodes: 3, settings: FAILOVER_SETTINGS });
try {
  const kafka = new Kafka({
    clientId: 'repro',
    brokers: c.brokers,
    logLevel: logLevel.NOTHING,
    connectionTimeout: 3_000,
    requestTimeout: 5_000,
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1_000 },
  });
  const admin = kafka.admin();
  await admin.connect();
  const leaders = await createReplicatedTopic(admin, 'r');
  console.log(
    'leaders',
    leaders.map((p) => [p.partitionId, p.leader]),
  );
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1_000 } });
  await producer.connect();
  const acked = new Set<string>();
  let n = 0,
    failed = 0,
    stop = false;
  const loop = (async () => {
    while (!stop) {
      const msgs = [0, 1, 2].flatMap((p) => Array.from({ length: 5 }, () => ({ partition: p, value: String(n++) })));
      try {
        await producer.sendBatch({ acks: -1, topicMessages: [{ topic: 'r', messages: msgs }] });
        msgs.forEach((m) => acked.add(m.value));
      } catch {
        failed++;
      }
    }
  })();
  const victim = await killPartition0LeaderMidStream(c, leaders);
  stop = true;
  await loop;
  console.log('killed', victim);
  console.log(
    'leaders after',
    (await leadersOf(admin, 'r')).map((p) => [p.partitionId, p.leader]),
  );
  const { seen, highs } = await valuesInLog(kafka, admin, 'r', 'repro-read');
  const lost = [...acked].filter((v) => !seen.has(v));
  console.log(
    JSON.stringify({
      sent: n,
      acked: acked.size,
      failedSends: failed,
      inLog: seen.size,
      lostAcked: lost.length,
      lostSample: lost.slice(0, 10),
      highs: highs.map((h) => [h.partition, h.high]),
    }),
  );
  await producer.disconnect();
  await admin.disconnect();
} finally {
  await c.stop();
}
