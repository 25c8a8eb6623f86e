import { topicDefinitions } from '@shopstream/contracts';
import type { TopicSpec } from './port.js';
import { topicOf, type TopicNames } from './topicNames.js';

/**
 * What a topic is to Shopstream, which decides how long it keeps records:
 * - `source`: what happened (events, conversations). Projections are rebuilt from it, so it keeps every record.
 * - `dead-letter`: records a consumer refused; the only copy of what they said once redriven or fixed. Kept.
 * - `derived`: produced by a projector from a source topic (metrics, flow-triggers); a rebuild can produce it
 *   again, so it keeps DERIVED_TOPIC_RETENTION_MS.
 */
export type TopicRole = 'source' | 'derived' | 'dead-letter';

export interface OwnedTopic {
  topic: string;
  role: TopicRole;
}

/** Every topic Shopstream owns, with its role: the contracts' topics and a dead-letter topic for each. */
export function ownedTopics(names: TopicNames): OwnedTopic[] {
  const main: OwnedTopic[] = Object.entries(topicDefinitions).map(([k, t]) => ({ topic: names[k as keyof typeof topicDefinitions], role: t.role }));
  return [...main, ...main.map((t) => ({ topic: names.dlq(t.topic), role: 'dead-letter' as const }))];
}

/** `retention.ms=-1`: Kafka's (and the Postgres log's) "never delete by age". */
export const KEEP_FOREVER = '-1';

/** The topic settings a role implies, by Kafka name. Both limits are set, so no broker default applies. */
export function roleConfig(role: TopicRole, derivedRetentionMs: number): Record<string, string> {
  switch (role) {
    case 'source':
    case 'dead-letter':
      return { 'retention.ms': KEEP_FOREVER, 'retention.bytes': KEEP_FOREVER };
    case 'derived':
      return { 'retention.ms': String(derivedRetentionMs), 'retention.bytes': KEEP_FOREVER };
    default: {
      const never: never = role;
      throw new Error(`unknown topic role ${String(never)}`);
    }
  }
}

export type OwnedTopicSpec = TopicSpec & OwnedTopic & { config: Record<string, string> };

/** The specs services, `pnpm cli topics ensure` and tests create and align Shopstream's topics with. */
export function ownedTopicSpecs(
  names: TopicNames,
  opts: { partitions: number; derivedRetentionMs: number },
  /** Topics services declare beyond the contracts' (`defineService`'s `topics`): each, and its dead-letter topic. */
  declared: readonly { name: string; role: 'source' | 'derived' }[] = [],
): OwnedTopicSpec[] {
  const owned = ownedTopics(names);
  const known = new Set(owned.map((t) => t.topic));
  for (const d of declared) {
    const topic = topicOf(names, d);
    if (known.has(topic)) continue;
    known.add(topic);
    owned.push({ topic, role: d.role }, { topic: names.dlq(topic), role: 'dead-letter' });
  }
  return owned.map((t) => ({ ...t, partitions: opts.partitions, config: roleConfig(t.role, opts.derivedRetentionMs) }));
}

/** A kept topic (source or dead letter) whose settings in effect would delete records, and by which limit. */
export function finiteRetention(config: Record<string, string>): { name: string; value: string }[] {
  return ['retention.ms', 'retention.bytes']
    .filter((name) => config[name] !== undefined && config[name] !== KEEP_FOREVER)
    .map((name) => ({ name, value: config[name] }));
}
