import { conversationRecordSchema, type ConversationRecord } from './conversations.js';
import { defineTopic } from './defineTopic.js';
import { eventRecordSchema, flowTriggerRecordSchema, metricEventSchema, type EventRecord, type FlowTriggerRecord, type MetricEvent } from './records.js';
import { headers as H, topics } from './topics.js';

const metricNameHeader = {
  [H.metricName]: { describe: 'The metric name, to filter without parsing the value.', of: (v: { metric_name: string }) => v.metric_name },
};

/** `events`: every accepted event, as ingest-api wrote it. */
export const eventsTopic = defineTopic<EventRecord>({
  name: topics.events,
  message: 'eventRecorded',
  schema: eventRecordSchema,
  role: 'source',
  doc: {
    title: 'An event was recorded',
    description: 'Every accepted event, as ingest-api wrote it after resolving its contact: the source of truth of Activities. Kept forever.',
    senders: ['ingest-api', 'cli (dlq redrive)'],
    receivers: ['activity-projector'],
    consumer: 'activity-projector',
  },
});

/** `metrics`: one metric event per new Activity. */
export const metricsTopic = defineTopic<MetricEvent>({
  name: topics.metrics,
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
  name: topics.flowTriggers,
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
export const conversationsTopic = defineTopic<ConversationRecord>({
  name: topics.conversations,
  message: 'conversationRecord',
  schema: conversationRecordSchema,
  role: 'source',
  doc: {
    title: 'A conversation upserted, or a message created',
    description: 'Support conversations and their messages from upstream producers (`type` tells which). Kept forever.',
    senders: ['upstream producers', 'cli (conversations import)'],
    receivers: ['conversation-projector'],
    consumer: 'conversation-projector',
  },
});

/** Every topic Shopstream owns, by the same keys as `topics` and TopicNames. */
export const topicDefinitions = {
  events: eventsTopic,
  metrics: metricsTopic,
  flowTriggers: flowTriggersTopic,
  conversations: conversationsTopic,
} as const satisfies Record<keyof typeof topics, unknown>;
