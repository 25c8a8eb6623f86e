import { storedConversationRecordDecoder, type StoredConversationRecord } from './conversations.js';
import { defineTopic } from './defineTopic.js';
import { erasureRecordSchema, type ErasureRecord } from './privacy.js';
import {
  flowTriggerRecordSchema,
  metricEventSchema,
  storedEventRecordDecoder,
  type FlowTriggerRecord,
  type MetricEvent,
  type StoredEventRecord,
} from './records.js';
import { headers as H } from './topics.js';

const metricNameHeader = {
  [H.metricName]: { describe: 'The metric name, to filter without parsing the value.', of: (v: { metric_name: string }) => v.metric_name },
};

/** `events`: every accepted event, as ingest-api wrote it. */
export const eventsTopic = defineTopic<StoredEventRecord>({
  name: 'events',
  message: 'eventRecordedV2',
  // Decodes by form; the contract (JSON Schema) is storedEventRecordSchema (topicContracts).
  schema: storedEventRecordDecoder,
  role: 'source',
  doc: {
    title: 'An event was recorded',
    description:
      'Every accepted event, as ingest-api wrote it after resolving its contact: the source of truth of Activities. Kept forever. ' +
      "Since event-recorded.v2 the personal fields of an event with a contact are sealed under the contact's data key (docs/privacy.md); records written before carry event-recorded.v1, in plaintext.",
    senders: ['ingest-api', 'cli (dlq redrive)'],
    receivers: ['activity-projector'],
    consumer: 'activity-projector',
  },
});

/** `metrics`: one metric event per new Activity. */
export const metricsTopic = defineTopic<MetricEvent>({
  name: 'metrics',
  message: 'metricEvent',
  schema: metricEventSchema,
  headers: metricNameHeader,
  role: 'derived',
  doc: {
    title: 'A metric event',
    description: 'One metric event per new Activity; `id` equals the activity id (deduplicate a rare repeat by it). Derived: kept DERIVED_TOPIC_RETENTION_MS.',
    senders: ['activity-projector'],
    receivers: ['flow-matcher', 'analytics consumers'],
    consumer: 'flow-matcher',
  },
});

/** `flow-triggers`: one record per (flow, metric event) a flow matched. */
export const flowTriggersTopic = defineTopic<FlowTriggerRecord>({
  name: 'flow-triggers',
  message: 'flowTriggered',
  schema: flowTriggerRecordSchema,
  headers: metricNameHeader,
  role: 'derived',
  doc: {
    title: 'A flow was triggered',
    description: 'One record per (flow, metric event) a flow matched; `id` is UUIDv5 of both. Derived: kept DERIVED_TOPIC_RETENTION_MS.',
    senders: ['flow-matcher'],
    receivers: ['analytics consumers', 'automation'],
    consumer: 'flow-triggers consumers',
  },
});

/** `conversations`: support conversations and their messages from upstream producers. */
export const conversationsTopic = defineTopic<StoredConversationRecord>({
  name: 'conversations',
  message: 'conversationRecordV2',
  // Decodes by form; the contract (JSON Schema) is storedConversationRecordSchema (topicContracts).
  schema: storedConversationRecordDecoder,
  role: 'source',
  doc: {
    title: 'A conversation upserted, or a message created',
    description:
      'Support conversations and their messages from upstream producers (`type` tells which). Kept forever. ' +
      "Since conversation-record.v2 the CLI's import and seed seal the free text of a conversation with a contact (title, summary, last_message_content, messages' text) under the contact's data key (docs/privacy.md); upstream producers may write the v1 forms, in plaintext.",
    senders: ['upstream producers', 'cli (conversations import)'],
    receivers: ['conversation-projector'],
    consumer: 'conversation-projector',
  },
});

/** `erasures`: one record per contact an erasure job erased, for downstream consumers to erase what they hold. */
export const erasuresTopic = defineTopic<ErasureRecord>({
  name: 'erasures',
  message: 'contactErased',
  schema: erasureRecordSchema,
  role: 'source',
  doc: {
    title: 'A contact was erased',
    description:
      'One record per contact an erasure job erased (`id` is UUIDv5 of the job and the contact: a restarted job may announce it again). No identifier in plaintext. ' +
      'Consumers that keep personal data from `metrics` or `flow-triggers` erase what they hold for `contact_id` (docs/privacy.md). Kept forever.',
    senders: ['query-api (erasure jobs)'],
    receivers: ['downstream consumers'],
    consumer: 'erasures consumers',
  },
});

/** Every topic Shopstream owns, declared once: `topics`, TopicNames, the topic roles and AsyncAPI derive from it. */
export const topicDefinitions = {
  events: eventsTopic,
  metrics: metricsTopic,
  flowTriggers: flowTriggersTopic,
  conversations: conversationsTopic,
  erasures: erasuresTopic,
} as const;

/** The names of the topics Shopstream owns, by key, without the deployment's TOPIC_PREFIX. */
export const topics = Object.fromEntries(Object.entries(topicDefinitions).map(([key, t]) => [key, t.name])) as {
  readonly [K in keyof typeof topicDefinitions]: string;
};
export type TopicName = (typeof topics)[keyof typeof topics];
