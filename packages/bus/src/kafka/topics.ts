import { topicLimits } from '@shopstream/contracts';
import { BusUnavailableError, type Bus, type ConfigChange, type TopicSpec } from '../port.js';

/** The topic methods of both Kafka adapters' Bus (ensureTopics, alignTopicConfigs, topicConfigs) over each client's admin. */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Asks every 100 ms until ready() answers true; BusUnavailableError with failure()'s words after 30 s. */
async function within30s(ready: () => Promise<boolean>, failure: () => string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (await ready()) return;
    if (Date.now() > deadline) throw new BusUnavailableError(failure());
    await sleep(100);
  }
}

/** The settings a topic is created with: Shopstream's limits, then the spec's own. */
function topicCreateConfig(spec: TopicSpec, replicationFactor: number): Record<string, string> {
  return {
    'max.message.bytes': String(topicLimits.maxMessageBytes),
    // acks=-1 means "every in-sync replica": with the broker's default of 1, a leader whose followers
    // fell behind acknowledges alone, and losing it loses answered events. 2 of 3 in production.
    'min.insync.replicas': String(Math.min(2, replicationFactor)),
    ...spec.config,
  };
}

/** A topic setting as the broker describes it: `own` when the topic itself sets it, not a broker default. */
export interface TopicSetting {
  name: string;
  value: string | null;
  own: boolean;
  /**
   * The broker does not tell its value (value null): a client whose alter replaces every setting of a topic
   * (kafkajs, see kafkajs/admin.ts) cannot send it back, so it refuses to change such a topic's settings.
   */
  sensitive: boolean;
}

/** A topic ensureTopics creates, as it creates it. */
export interface NewTopic {
  topic: string;
  partitions: number;
  replicationFactor: number;
  /** Shopstream's limits, then the spec's own settings (topicCreateConfig). */
  settings: Record<string, string>;
}

/** What alignTopicConfigs changes on one topic, with every setting the topic had when the changes were worked out. */
export interface TopicConfigUpdate {
  topic: string;
  changes: ConfigChange[];
  settings: TopicSetting[];
}

/** The admin calls the bus's topic methods (kafkaTopicMethods) need, in each Kafka client's own words. */
export interface KafkaTopicAdmin {
  listTopics(): Promise<string[]>;
  /** Creates the topics; one that another process created meanwhile is no error. */
  createTopics(topics: NewTopic[]): Promise<void>;
  /**
   * Every partition of `names` has a leader, and each of `created` answers its offsets. Rejecting counts as
   * not yet.
   */
  topicsServed(names: string[], created: string[]): Promise<boolean>;
  /** Every setting in effect per topic, with where it comes from (the topic itself, or a broker default). */
  describeTopics(names: string[]): Promise<Map<string, TopicSetting[]>>;
  /** Sets each update's changes on its topic; every other own setting of the topics stays as it is. */
  setTopicConfigs(updates: TopicConfigUpdate[]): Promise<void>;
}

/** The specs of alignTopicConfigs that set topic settings, of the topics that exist (it creates none). */
async function specsToAlign(specs: TopicSpec[], listTopics: () => Promise<string[]>): Promise<TopicSpec[]> {
  const wanted = specs.filter((s) => s.config && Object.keys(s.config).length > 0);
  if (wanted.length === 0) return [];
  const existing = new Set(await listTopics());
  return wanted.filter((s) => existing.has(s.topic));
}

/** What setting spec's config on its topic changes, given the topic's settings now. */
function configChanges(spec: TopicSpec, settings: TopicSetting[]): ConfigChange[] {
  const own = new Map(settings.filter((s) => s.own).map((s) => [s.name, s]));
  const changes: ConfigChange[] = [];
  for (const [name, to] of Object.entries(spec.config ?? {})) {
    const current = own.get(name);
    if (current?.value === to) continue;
    const effective = current ?? settings.find((s) => s.name === name);
    changes.push({ topic: spec.topic, name, from: effective?.value ?? null, inherited: current === undefined, to });
  }
  return changes;
}

/**
 * The broker answers a change of settings before it applies it (KRaft: once the controller wrote the record),
 * so a describe right after may still show the old values. Resolves with the changes once every one reads
 * back as the topic's own setting, as the port says; BusUnavailableError after 30 s.
 */
async function untilApplied(changes: ConfigChange[], describe: (topics: string[]) => Promise<Map<string, TopicSetting[]>>): Promise<ConfigChange[]> {
  const topics = [...new Set(changes.map((c) => c.topic))];
  let pending = changes;
  await within30s(
    async () => {
      const now = await describe(topics);
      pending = changes.filter((c) => !(now.get(c.topic) ?? []).some((s) => s.name === c.name && s.value === c.to && s.own));
      return pending.length === 0;
    },
    () => `Kafka has not applied ${pending.map((c) => `${c.topic} ${c.name}=${c.to}`).join(', ')} after 30 s`,
  );
  return changes;
}

/** The topic methods of both adapters' Bus: one algorithm, each client's admin calls behind `admin`. */
export function kafkaTopicMethods(admin: KafkaTopicAdmin, replicationFactor: number): Pick<Bus, 'ensureTopics' | 'alignTopicConfigs' | 'topicConfigs'> {
  return {
    async ensureTopics(specs) {
      const existing = new Set(await admin.listTopics());
      const missing = specs.filter((s) => !existing.has(s.topic));
      if (missing.length > 0) {
        await admin.createTopics(
          missing.map((s) => ({ topic: s.topic, partitions: s.partitions, replicationFactor, settings: topicCreateConfig(s, replicationFactor) })),
        );
      }
      // A new partition's leader named in the metadata may not serve it yet (NOT_LEADER_OR_FOLLOWER on the first
      // ListOffsets or Produce): ready when every partition has a leader and the new topics answer their offsets.
      const names = specs.map((s) => s.topic);
      const created = missing.map((s) => s.topic);
      await within30s(
        () => admin.topicsServed(names, created).catch(() => false),
        () => `Kafka topics have no leaders after 30 s: ${names.join(', ')}`,
      );
    },

    async alignTopicConfigs(specs) {
      const present = await specsToAlign(specs, () => admin.listTopics());
      if (present.length === 0) return [];
      const described = await admin.describeTopics(present.map((s) => s.topic));
      const updates = present.flatMap((spec): TopicConfigUpdate[] => {
        const settings = described.get(spec.topic) ?? [];
        const changes = configChanges(spec, settings);
        return changes.length > 0 ? [{ topic: spec.topic, changes, settings }] : [];
      });
      if (updates.length === 0) return [];
      await admin.setTopicConfigs(updates);
      return untilApplied(
        updates.flatMap((u) => u.changes),
        (topics) => admin.describeTopics(topics),
      );
    },

    // Own and default settings alike; a setting the broker describes without a value (a sensitive one) is left out.
    async topicConfigs(names) {
      if (names.length === 0) return {};
      const described = await admin.describeTopics(names);
      return Object.fromEntries(
        names.map((t) => [t, Object.fromEntries((described.get(t) ?? []).flatMap((s) => (s.value === null ? [] : [[s.name, s.value]])))]),
      );
    },
  };
}
