import type { z } from 'zod';
import { headers as H, schemas } from './topics.js';

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

/** A value on a topic: every record Shopstream owns is keyed by its shop. */
interface ShopScoped {
  shop_id: string;
}

export interface TopicDeclaration<T> {
  /** The topic's name without the deployment's TOPIC_PREFIX. */
  name: string;
  /**
   * The contract's key in `schemas`: its value is carried in the `schema` header (`event-recorded.v1`), and the
   * key names the message in the AsyncAPI document (`eventRecorded`).
   */
  message: keyof typeof schemas | { id: string; schema: string };
  schema: z.ZodType<T>;
  /** Headers beyond the envelope's (content-type, schema, shop_id), to route or filter without parsing. */
  headers?: { [name: string]: { describe: string; of(value: T): string } };
  /**
   * What a topic is to Shopstream, which decides how long it keeps records: `source` (projections are rebuilt
   * from it: kept forever) or `derived` (a projector produces it again: kept DERIVED_TOPIC_RETENTION_MS).
   */
  role: 'source' | 'derived';
  doc: Omit<TopicDoc, 'messageId'>;
}

export interface TopicDefinition<T> extends Omit<TopicDeclaration<T>, 'message' | 'doc'> {
  /** The contract's name, carried in the `schema` header (`event-recorded.v1`). */
  schemaId: string;
  doc: TopicDoc;
  /** The envelope's headers of a value: content-type, schema, shop_id and the topic's own. */
  recordHeaders(value: T): Record<string, string>;
  /** The value as a record of this topic. `encoded` is its JSON when the caller has it already (a CLI import line). */
  record(value: T, encoded?: string): TopicRecord;
}

/**
 * A topic declared once: its name, contract and headers. Publishers build records with `record`, keyed by the
 * value's shop_id so one shop's records stay in one partition, in order; consumers decode with `schema`, and the
 * AsyncAPI document and the JSON Schema files come from the same declaration; the size limits are `topicLimits`.
 */
export function defineTopic<T extends ShopScoped>({ message, doc, ...d }: TopicDeclaration<T>): TopicDefinition<T> {
  // A topic of Shopstream's contracts names its key in `schemas`; a service's own topic names its contract itself.
  const [messageId, schemaId] = typeof message === 'string' ? [message, schemas[message]] : [message.id, message.schema];
  const extra = Object.entries(d.headers ?? {});
  const recordHeaders = (value: T): Record<string, string> => {
    const h: Record<string, string> = { [H.contentType]: 'application/json', [H.schema]: schemaId, [H.shopId]: value.shop_id };
    for (const [name, header] of extra) h[name] = header.of(value);
    return h;
  };
  return {
    ...d,
    schemaId,
    doc: { messageId, ...doc },
    recordHeaders,
    record: (value, encoded) => ({ key: value.shop_id, value: encoded ?? JSON.stringify(value), headers: recordHeaders(value) }),
  };
}
