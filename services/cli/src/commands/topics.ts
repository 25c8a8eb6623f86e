import { ownedTopicSpecs, type ConfigChange } from '@shopstream/bus';
import type { Runtime } from '@shopstream/runtime';
import { topicDefinitions } from '@shopstream/contracts';
import { parse, type Command } from '../args.js';
import { withRuntime } from '../context.js';

/** The contracts' topics (of one role, if given), named as the usage text names them. */
const topicList = (role?: 'source' | 'derived'): string =>
  Object.values(topicDefinitions)
    .filter((t) => role === undefined || t.role === role)
    .map((t) => t.name)
    .join(', ');

const ensureUsage = `  pnpm cli topics ensure
      Creates the topics Shopstream owns (${topicList()} and a .dlq for each),
      with KAFKA_PARTITIONS partitions and KAFKA_REPLICATION replicas, under TOPIC_PREFIX, and gives every topic,
      new or existing, the retention of its role: source topics (${topicList('source')}) and dead-letter topics
      keep every record (retention.ms=-1, retention.bytes=-1); derived topics (${topicList('derived')}) keep
      DERIVED_TOPIC_RETENTION_MS. Prints each setting it changed (topic, setting, old -> new), or that none changed.
      Other settings of an existing topic, and its partitions, are left as they are.`;

/** Aligns the owned topics (the runtime created the missing ones) and says what happened, line by line. */
export async function ensureTopics(rt: Runtime): Promise<{ changes: ConfigChange[]; lines: string[] }> {
  const specs = ownedTopicSpecs(rt.topics, { partitions: rt.env.KAFKA_PARTITIONS, derivedRetentionMs: rt.env.DERIVED_TOPIC_RETENTION_MS });
  const changes = await rt.bus.alignTopicConfigs(specs);
  const width = Math.max(...specs.map((s) => s.topic.length));
  const lines = [
    `Topics on ${rt.bus.description}:`,
    ...specs.map(
      (s) => `  ${s.topic.padEnd(width)}  ${s.role === 'derived' ? `derived: keeps ${s.config['retention.ms']} ms` : `${s.role}: keeps every record`}`,
    ),
  ];
  if (changes.length === 0) lines.push('Nothing changed: every topic already had the settings of its role.');
  else {
    lines.push(`Changed ${changes.length} setting${changes.length === 1 ? '' : 's'}:`);
    // The same value set on the topic itself: a later change of the broker's default no longer reaches it.
    for (const c of changes)
      lines.push(
        `  ${c.topic} ${c.name}: ${c.from ?? 'unknown'}${c.inherited ? ' (broker default)' : ''} -> ${c.to}${c.inherited && c.from === c.to ? ' (now set on the topic)' : ''}`,
      );
  }
  return { changes, lines };
}

export const command: Command = {
  subcommands: {
    ensure: {
      usage: ensureUsage,
      async run(args) {
        parse(args, {});
        // Opening the runtime creates the missing topics: the same code path every service takes at start. Its
        // retention warning would advise running this very command, so it is left out.
        await withRuntime(async (rt) => console.log((await ensureTopics(rt)).lines.join('\n')), { checkRetention: false });
        return 0;
      },
    },
  },
};
