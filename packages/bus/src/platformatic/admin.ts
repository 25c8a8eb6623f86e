import { Admin, ConfigResourceTypes, ConfigSources, IncrementalAlterConfigOperationTypes } from '@platformatic/kafka';
import type { Bus } from '../port.js';
import type { KafkaAdmin } from '../kafkaCommon.js';
import { partitionLag } from '../offsetMath.js';
import { hasApiError, type ClientBase } from './client.js';

/** The @platformatic/kafka adapter's admin client: the admin calls of kafkaBus, lag and offsets. */
export function platformaticAdmin(base: ClientBase, opts: { clientId: string }) {
  const admin = new Admin({ ...base, clientId: `${opts.clientId}-admin`, retries: 3 });

  /** Each partition's first offset still held and log end, in partition order. */
  const partitionOffsets = async (topic: string) => {
    const md = await admin.metadata({ topics: [topic], forceUpdate: true });
    const count = md.topics.get(topic)!.partitionsCount;
    const ask = (timestamp: bigint) =>
      admin.listOffsets({ topics: [{ name: topic, partitions: Array.from({ length: count }, (_, partitionIndex) => ({ partitionIndex, timestamp })) }] });
    const [low, high] = await Promise.all([ask(-2n), ask(-1n)]);
    const at = (res: typeof low, p: number) => res[0].partitions.find((x) => x.partitionIndex === p)!.offset;
    return Array.from({ length: count }, (_, partition) => ({ partition, low: at(low, partition), high: at(high, partition) }));
  };

  /** Deletes a consumer group; true when it is gone (or never existed), false while it still has members. */
  const deleteGroup = async (groupId: string): Promise<boolean> => {
    try {
      await admin.deleteGroups({ groups: [groupId] });
      return true;
    } catch (e) {
      if (hasApiError(e, 'GROUP_ID_NOT_FOUND')) return true;
      if (hasApiError(e, 'NON_EMPTY_GROUP')) return false;
      throw e;
    }
  };

  // The admin calls of kafkaBus in @platformatic/kafka's words.
  const busAdmin: KafkaAdmin = {
    listTopics: () => admin.listTopics(),
    async createTopics(topics) {
      for (const t of topics) {
        try {
          await admin.createTopics({
            topics: [t.topic],
            partitions: t.partitions,
            replicas: t.replicationFactor,
            configs: Object.entries(t.settings).map(([name, value]) => ({ name, value })),
          });
        } catch (e) {
          // Another process created it meanwhile: as if it had existed.
          if (!hasApiError(e, 'TOPIC_ALREADY_EXISTS')) throw e;
        }
      }
    },
    async topicsServed(names, created) {
      const m = await admin.metadata({ topics: names, forceUpdate: true });
      const led = names.every((t) => (m.topics.get(t)?.partitions.length ?? 0) > 0 && m.topics.get(t)!.partitions.every((p) => p.leader >= 0));
      return led && (await Promise.all(created.map((t) => partitionOffsets(t))), true);
    },
    async describeTopics(names) {
      const res = await admin.describeConfigs({ resources: names.map((resourceName) => ({ resourceType: ConfigResourceTypes.TOPIC, resourceName })) });
      return new Map(
        res.map((r) => [
          r.resourceName,
          r.configs.map((e) => ({ name: e.name, value: e.value ?? null, own: e.configSource === ConfigSources.TOPIC_CONFIG, sensitive: e.isSensitive })),
        ]),
      );
    },
    async setTopicConfigs(updates) {
      // IncrementalAlterConfigs sets only the settings named; the topic's others stay as they are.
      await admin.incrementalAlterConfigs({
        resources: updates.map(({ topic, changes }) => ({
          resourceType: ConfigResourceTypes.TOPIC,
          resourceName: topic,
          configs: changes.map((c) => ({ name: c.name, configOperation: IncrementalAlterConfigOperationTypes.SET, value: c.to })),
        })),
      });
    },
    deleteGroup,
    serving: () => admin.metadata({ topics: [], forceUpdate: true }),
  };

  const own: Pick<Bus, 'lag' | 'offsets'> = {
    async lag(groupId, topicNames) {
      const out: { topic: string; partition: number; lag: number }[] = [];
      for (const topic of topicNames) {
        const ends = await partitionOffsets(topic);
        const [group] = await admin.listConsumerGroupOffsets({
          groups: [{ groupId, topics: [{ name: topic, partitionIndexes: ends.map((e) => e.partition) }] }],
        });
        const committed = new Map((group?.topics.find((t) => t.name === topic)?.partitions ?? []).map((p) => [p.partitionIndex, p.committedOffset]));
        for (const e of ends) out.push({ topic, partition: e.partition, lag: partitionLag(e, committed.get(e.partition) ?? null) });
      }
      return out;
    },

    async offsets(topic) {
      return (await partitionOffsets(topic)).map((e) => ({ partition: e.partition, low: e.low.toString(), high: e.high.toString() }));
    },
  };

  return { admin, partitionOffsets, busAdmin, ...own };
}
