import kafkajs, { Kafka, logLevel, type Admin, type ConfigEntries, type KafkaConfig } from 'kafkajs';
import type { Bus } from '../port.js';
import type { KafkaAdmin } from '../kafkaCommon.js';
import type { TopicSetting } from '../kafka/topics.js';
import { partitionLag } from '../offsetMath.js';

/** The kafkajs adapter's admin client: the admin calls of kafkaBus, lag and offsets. */

// kafkajs is CommonJS: Node's ESM loader finds the named exports above in its index.js, not these two enums.
const { ConfigResourceTypes, ConfigSource } = kafkajs;

/** A kafkajs topic setting as both adapters compare them (kafkajs types configValue as a string; a sensitive one is null). */
const settingOf = (e: ConfigEntries): TopicSetting => ({
  name: e.configName,
  value: e.configValue ?? null,
  own: e.configSource === ConfigSource.TOPIC_CONFIG,
  sensitive: e.isSensitive,
});

/** What kafkajsAdmin needs of the bus's options: a probe (servesOffsets) connects as the bus does. */
interface AdminOptions {
  clientId: string;
  brokers: string[];
  connection: Pick<KafkaConfig, 'ssl' | 'sasl'>;
}

/** The admin of a kafkajs bus, connected on first use. */
export function kafkajsAdmin(kafka: Kafka, opts: AdminOptions) {
  const { connection } = opts;
  const admin: Admin = kafka.admin();
  // Connected on first use, like the producer: a bus over an unreachable broker still exists, so publish
  // can reject with BusUnavailableError and ping() can answer false, instead of the factory throwing.
  let adminConnected: Promise<void> | null = null;
  const connectAdmin = () =>
    (adminConnected ??= admin.connect().catch((e) => {
      adminConnected = null;
      throw e;
    }));

  /**
   * A created topic is ready when every partition answers its offsets (see kafkaTopicMethods). Asked by a
   * client of its own that logs nothing: kafkajs logs each such expected refusal (NOT_LEADER_OR_FOLLOWER) as
   * an error.
   */
  const servesOffsets = async (topics: string[]): Promise<boolean> => {
    const probe = new Kafka({
      clientId: `${opts.clientId}-probe`,
      brokers: opts.brokers,
      ...connection,
      logLevel: logLevel.NOTHING,
      retry: { retries: 0 },
    }).admin();
    try {
      await probe.connect();
      await Promise.all(topics.map((t) => probe.fetchTopicOffsets(t)));
      return true;
    } catch {
      return false;
    } finally {
      await probe.disconnect().catch(() => {});
    }
  };

  /** Deletes a consumer group; true when it is gone (or never existed), false while it still has members. */
  const deleteGroup = async (groupId: string): Promise<boolean> => {
    await connectAdmin();
    try {
      await admin.deleteGroups([groupId]);
      return true;
    } catch (e) {
      const codes = ((e as { groups?: { errorCode?: number; error?: { type?: string } }[] }).groups ?? []).map((g) => g.error?.type);
      // GROUP_ID_NOT_FOUND: nothing to forget.
      if (codes.length > 0 && codes.every((c) => c === 'GROUP_ID_NOT_FOUND')) return true;
      if (codes.length > 0 && codes.every((c) => c === 'NON_EMPTY_GROUP')) return false;
      throw e;
    }
  };

  // The admin calls of kafkaBus in kafkajs' words, each after connectAdmin.
  const busAdmin: KafkaAdmin = {
    listTopics: () => connectAdmin().then(() => admin.listTopics()),
    async createTopics(topics) {
      await connectAdmin();
      // Not waitForLeaders: on KRaft kafkajs' wait can fail with "does not host this topic-partition"
      // while leaders are still being elected (tulios/kafkajs#1563). We poll the metadata ourselves (topicsServed).
      // A topic another process created meanwhile is no error: kafkajs resolves false when every topic it was
      // refused is TOPIC_ALREADY_EXISTS.
      await admin.createTopics({
        waitForLeaders: false,
        topics: topics.map((t) => ({
          topic: t.topic,
          numPartitions: t.partitions,
          replicationFactor: t.replicationFactor,
          configEntries: Object.entries(t.settings).map(([name, value]) => ({ name, value })),
        })),
      });
    },
    async topicsServed(names, created) {
      await connectAdmin();
      const m = await admin.fetchTopicMetadata({ topics: names });
      const led = m.topics.every((t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0));
      return led && (created.length === 0 || (await servesOffsets(created)));
    },
    async describeTopics(names) {
      await connectAdmin();
      const res = await admin.describeConfigs({ includeSynonyms: false, resources: names.map((name) => ({ type: ConfigResourceTypes.TOPIC, name })) });
      return new Map(res.resources.map((r) => [r.resourceName, r.configEntries.map(settingOf)]));
    },
    async setTopicConfigs(updates) {
      // kafkajs speaks only the non-incremental AlterConfigs, which resets every topic setting it is not
      // given to the broker default (max.message.bytes would fall to 1 MiB, refusing large bulk requests).
      // So the topic's own settings, as described before the changes were worked out, are sent back with the
      // changes. Read-modify-write: a setting changed by someone else between the two requests is lost;
      // running `topics ensure` alone avoids that. A setting whose value the broker does not tell (a sensitive
      // one) cannot be sent back: such a topic is refused, before anything is altered.
      const resources = updates.map(({ topic, changes, settings }) => {
        const merged = new Map<string, string>();
        const sensitive: string[] = [];
        for (const e of settings) {
          if (!e.own) continue;
          if (e.sensitive || e.value === null) sensitive.push(e.name);
          else merged.set(e.name, e.value);
        }
        if (sensitive.length > 0) {
          throw new Error(
            `topic ${topic} has sensitive settings (${sensitive.join(', ')}) that cannot be read back; set ${changes.map((c) => c.name).join(', ')} with kafka-configs.sh`,
          );
        }
        for (const c of changes) merged.set(c.name, c.to);
        return { type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [...merged].map(([name, value]) => ({ name, value })) };
      });
      await connectAdmin();
      await admin.alterConfigs({ validateOnly: false, resources });
    },
    deleteGroup,
    async serving() {
      await connectAdmin();
      return admin.describeCluster();
    },
  };

  const own: Pick<Bus, 'lag' | 'offsets'> = {
    async lag(groupId, topicNames) {
      const out: { topic: string; partition: number; lag: number }[] = [];
      await connectAdmin();
      const committed = await admin.fetchOffsets({ groupId, topics: topicNames });
      for (const t of committed) {
        const ends = await admin.fetchTopicOffsets(t.topic);
        for (const p of t.partitions) {
          const end = ends.find((e) => e.partition === p.partition);
          if (!end) continue;
          out.push({ topic: t.topic, partition: p.partition, lag: partitionLag(end, p.offset) });
        }
      }
      return out;
    },

    async offsets(topic) {
      await connectAdmin();
      const rows = await admin.fetchTopicOffsets(topic);
      return rows.map((r) => ({ partition: r.partition, low: r.low, high: r.high })).sort((a, b) => a.partition - b.partition);
    },
  };

  return { admin, connectAdmin, deleteGroup, busAdmin, ...own, disconnect: () => admin.disconnect() };
}
