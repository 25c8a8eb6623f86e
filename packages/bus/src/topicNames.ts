import { topics, dlq } from '@shopstream/contracts';

export type TopicNames = { [K in keyof typeof topics]: string } & { dlq(topic: string): string };

/** The deployment's topic names: TOPIC_PREFIX lets tests and tenants of one cluster keep apart. */
export function topicNames(prefix = ''): TopicNames {
  return {
    events: `${prefix}${topics.events}`,
    metrics: `${prefix}${topics.metrics}`,
    flowTriggers: `${prefix}${topics.flowTriggers}`,
    conversations: `${prefix}${topics.conversations}`,
    dlq,
  };
}
