import { topics, dlq } from '@shopstream/contracts';

export type TopicNames = { [K in keyof typeof topics]: string } & { dlq(topic: string): string };

/** The deployment's topic names: TOPIC_PREFIX lets tests and tenants of one cluster keep apart. */
export function topicNames(prefix = ''): TopicNames {
  const names = Object.fromEntries(Object.entries(topics).map(([key, name]) => [key, `${prefix}${name}`]));
  return { ...(names as { [K in keyof typeof topics]: string }), dlq };
}

const keyOfName = new Map(Object.entries(topics).map(([k, name]) => [name as string, k as keyof typeof topics]));

/**
 * The deployment's name of a declared topic (`defineTopic`): one of the contracts' topics by its key, a topic a
 * service declares itself (`defineService`'s `topics`) by its name after the deployment's TOPIC_PREFIX.
 */
export function topicOf(names: TopicNames, topic: { name: string }): string {
  const key = keyOfName.get(topic.name);
  return key ? names[key] : `${names.events.slice(0, names.events.length - topics.events.length)}${topic.name}`;
}
