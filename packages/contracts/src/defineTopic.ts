import type { z } from 'zod';
import { headers as H } from './topics.js';

/**
 * The size limits of every topic Shopstream owns, in one place.
 * - `maxMessageBytes`: the topics' max.message.bytes (Kafka refuses a record batch above it). Above the largest
 *   single publish (a 10 MiB bulk request grows by its contacts and metadata), so a request the API accepted is
 *   never refused by the broker for its size.
 * - `sendBudgetBytes`: what one send carries when the bus adapter merges or splits publishes. A publish up to
 *   `maxMessageBytes` goes in one send (all or nothing, as ingest's 503 promises); a larger one (an outbox
 *   relay, a CLI import) is split into sends of at most this, in order.
 */
export const topicLimits = {
  maxMessageBytes: 16 * 1024 * 1024,
  sendBudgetBytes: 4 * 1024 * 1024,
} as const;

/** A record as it goes on a topic: keyed by shop, with the envelope headers. Structurally a bus OutgoingRecord. */
export interface TopicRecord {
  key: string;
  value: string;
  headers: Record<string, string>;
}

/** How the topic is described in the AsyncAPI document. */
export interface TopicDoc {
  messageId: string;
  title: string;
  description: string;
  senders: string[];
  receivers: string[];
  /** Who reads it: named in the description of its dead-letter topic. */
  consumer: string;
}

export interface TopicDeclaration<T> {
  /** The topic's name without the deployment's TOPIC_PREFIX. */
  name: string;
  /** The record key: the shop id, so one shop's records stay in one partition, in order. */
  key(value: T): string;
  /** The contract's name, carried in the `schema` header (`event-recorded.v1`). */
  schemaId: string;
  schema: z.ZodType<T>;
  /** Headers beyond the envelope's (content-type, schema, shop_id), to route or filter without parsing. */
  headers?: { [name: string]: { describe: string; of(value: T): string } };
  /**
   * What a topic is to Shopstream, which decides how long it keeps records: `source` (projections are rebuilt
   * from it: kept forever) or `derived` (a projector produces it again: kept DERIVED_TOPIC_RETENTION_MS).
   */
  role: 'source' | 'derived';
  doc: TopicDoc;
}

export interface TopicDefinition<T> extends TopicDeclaration<T> {
  /** The envelope's headers of a value: content-type, schema, shop_id and the topic's own. */
  recordHeaders(value: T): Record<string, string>;
  /** The value as a record of this topic. `encoded` is its JSON when the caller has it already (a CLI import line). */
  record(value: T, encoded?: string): TopicRecord;
}

/**
 * A topic declared once: its name, key, contract and headers. Publishers build records with `record`,
 * consumers decode with `schema`, and the AsyncAPI document and the JSON Schema files come from the same
 * declaration; the size limits are `topicLimits`.
 */
export function defineTopic<T>(d: TopicDeclaration<T>): TopicDefinition<T> {
  const extra = Object.entries(d.headers ?? {});
  const recordHeaders = (value: T): Record<string, string> => {
    const h: Record<string, string> = { [H.contentType]: 'application/json', [H.schema]: d.schemaId, [H.shopId]: d.key(value) };
    for (const [name, header] of extra) h[name] = header.of(value);
    return h;
  };
  return {
    ...d,
    recordHeaders,
    record: (value, encoded) => ({ key: d.key(value), value: encoded ?? JSON.stringify(value), headers: recordHeaders(value) }),
  };
}
