/**
 * The topics Shopstream owns are declared once, in `topicDefinitions` (topicDefinitions.ts), which also derives
 * their names (`topics`). Every name gets the deployment's TOPIC_PREFIX (empty by default).
 */

export const dlq = (topic: string): string => `${topic}.dlq`;

/** Record headers: a consumer can route and filter on them without parsing the value. */
export const headers = {
  contentType: 'content-type',
  schema: 'schema',
  shopId: 'shop_id',
  metricName: 'metric_name',
  /** On a dead letter: why it was rejected, and where it came from. */
  dlqReason: 'dlq_reason',
  dlqSourceTopic: 'dlq_source_topic',
  dlqSourcePartition: 'dlq_source_partition',
  dlqSourceOffset: 'dlq_source_offset',
  /** On a record `pnpm cli dlq redrive` sent back: the dead letter it came from, `<dlq topic>/<partition>/<offset>`. */
  redrivenFrom: 'redriven_from',
  /**
   * W3C Trace Context (`00-<trace id>-<span id>-<flags>`), on any record: the span that produced it (OpenTelemetry's
   * messaging conventions). Consumers continue the trace from it; see trace-context-headers.v1.
   */
  traceparent: 'traceparent',
} as const;

export const schemas = {
  eventRecorded: 'event-recorded.v1',
  eventRecordedV2: 'event-recorded.v2',
  metricEvent: 'metric-event.v1',
  flowTriggered: 'flow-triggered.v1',
  conversationRecord: 'conversation-record.v1',
  conversationRecordV2: 'conversation-record.v2',
  contactErased: 'contact-erased.v1',
} as const;
