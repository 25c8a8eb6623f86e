/**
 * What kafkajsRetryLoss.ts (kafkajs alone) and busFailoverCheck.ts (Shopstream's Kafka adapter) do alike: a
 * topic over 3 partitions led by 3 nodes of a local cluster, the leader of partition 0 killed -9 while
 * publishes stream in, then every value the log holds read back to compare with what was acknowledged. The
 * cluster's failover settings are also the leader-failover scenario's. kafkajs alone: no Shopstream code.
 */
import type { KafkaClusterHandle } from '@shopstream/testkit';
import type { Admin, Kafka } from 'kafkajs';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Broker heartbeats every 500 ms and fenced after 3 s without one (Kafka's defaults: 2 s and 9 s). A killed
 * broker's partitions get a new leader only once the controller fences it, so the session timeout is the
 * floor of every failover: with the defaults no client can write to those partitions for about 9 s.
 */
export const FAILOVER_SETTINGS = { 'broker.heartbeat.interval.ms': '500', 'broker.session.timeout.ms': '3000' };

/** A topic of 3 partitions, each on all 3 nodes with min.insync.replicas 2; its leaders, once they settled. */
export async function createReplicatedTopic(admin: Admin, topic: string): Promise<{ partitionId: number; leader: number }[]> {
  await admin.createTopics({
    topics: [{ topic, numPartitions: 3, replicationFactor: 3, configEntries: [{ name: 'min.insync.replicas', value: '2' }] }],
    waitForLeaders: true,
  });
  await sleep(2000);
  return leadersOf(admin, topic);
}

export async function leadersOf(admin: Admin, topic: string): Promise<{ partitionId: number; leader: number }[]> {
  const md = await admin.fetchTopicMetadata({ topics: [topic] });
  return md.topics[0].partitions.map((p) => ({ partitionId: p.partitionId, leader: p.leader }));
}

/** 3 s into the stream, the leader of partition 0 killed -9; answers that node once the stream has run 12 s more. */
export async function killPartition0LeaderMidStream(cluster: KafkaClusterHandle, leaders: { partitionId: number; leader: number }[]): Promise<number> {
  await sleep(3000);
  const victim = leaders.find((p) => p.partitionId === 0)!.leader;
  await cluster.kill(victim);
  await sleep(12000);
  return victim;
}

/** Every value the topic's log holds, up to the high-water marks it has now (read for at most 30 s), and those marks. */
export async function valuesInLog(
  kafka: Kafka,
  admin: Admin,
  topic: string,
  groupId: string,
): Promise<{ seen: Set<string>; highs: { partition: number; high: string }[] }> {
  const highs = await admin.fetchTopicOffsets(topic);
  const total = highs.reduce((a, h) => a + Number(h.high), 0);
  const seen = new Set<string>();
  const consumer = kafka.consumer({ groupId });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await new Promise<void>((resolve) => {
    const t = setTimeout(resolve, 30000);
    void consumer.run({
      eachMessage: async ({ message }) => {
        seen.add(String(message.value));
        if (seen.size >= total) {
          clearTimeout(t);
          resolve();
        }
      },
    });
  });
  await consumer.disconnect();
  return { seen, highs };
}
