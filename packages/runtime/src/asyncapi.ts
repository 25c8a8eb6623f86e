import { contractJsonSchema, DLQ_HEADERS_SCHEMA, headers as H, topicDefinitions, TRACE_HEADERS_SCHEMA } from '@shopstream/contracts';
import type { TopicNames } from '@shopstream/bus';

type Json = Record<string, unknown>;

/** One topic: what its records are, who writes and who reads them. */
interface Channel {
  id: string;
  address: string;
  description: string;
  /** The contract its records follow (their `schema` header), or null for a dead-letter topic. */
  contract: string | null;
  messageId: string;
  title: string;
  senders: string[];
  receivers: string[];
  /** Headers beyond the envelope's, by name, with their description. */
  extraHeaders?: Record<string, string>;
}

/**
 * Lifts a contract's definitions into the document's components and points its refs there: inside the
 * AsyncAPI document `#/definitions/X` would resolve against the document's root.
 */
function liftSchema(name: string, into: Record<string, Json>): Json {
  const { definitions = {}, $schema: _s, ...top } = contractJsonSchema(name, 'draft-7') as Json;
  const rewrite = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(rewrite);
    if (node === null || typeof node !== 'object') return node;
    return Object.fromEntries(
      Object.entries(node).map(([k, v]) => [k, k === '$ref' && typeof v === 'string' ? v.replace('#/definitions/', '#/components/schemas/') : rewrite(v)]),
    );
  };
  for (const [id, def] of Object.entries(definitions as Record<string, Json>)) into[id] = rewrite(def) as Json;
  return rewrite(top) as Json;
}

/**
 * The partitioner is part of the contract: a producer outside Shopstream that writes a topic (conversations) must put
 * a shop's records where Shopstream's own producers do, or that shop's order breaks (test/partitioner.spec.ts).
 */
const PARTITIONER =
  "The partition is murmur2 of the key's UTF-8 bytes, made positive (& 0x7fffffff), modulo the topic's partition count: the Java client's default partitioner for a keyed record (BuiltInPartitioner.partitionForKey), which kafkajs' DefaultPartitioner and both Shopstream adapters use. librdkafka-based producers (kcat, confluent-kafka-python, node-rdkafka) default to CRC32 (consistent_random) and must set partitioner=murmur2_random; a producer that picks its own partition must compute the same.";

const uuidKey = {
  type: 'string',
  format: 'uuid',
  description: `The shop id: records of one shop stay in one partition, in order. ${PARTITIONER}`,
};

/**
 * An AsyncAPI 3.0 document of every topic Shopstream owns (with this deployment's TOPIC_PREFIX): channels,
 * their keys and headers, messages whose payloads are the JSON Schemas of packages/contracts/schemas, and which
 * service sends and receives each. Served at /asyncapi.json beside /openapi.json.
 */
export function buildAsyncApi(topics: TopicNames, brokers?: string[]): Json {
  const channels: Channel[] = Object.entries(topicDefinitions).map(([id, t]) => ({
    id,
    address: topics[id as keyof typeof topicDefinitions],
    description: t.doc.description,
    contract: t.schemaId,
    messageId: t.doc.messageId,
    title: t.doc.title,
    senders: t.doc.senders,
    receivers: t.doc.receivers,
    extraHeaders: Object.fromEntries(Object.entries(t.headers ?? {}).map(([name, h]) => [name, h.describe])),
  }));
  const consumerOf: Record<string, string> = Object.fromEntries(Object.entries(topicDefinitions).map(([id, t]) => [id, t.doc.consumer]));
  for (const c of [...channels]) {
    channels.push({
      id: `${c.id}Dlq`,
      address: topics.dlq(c.address),
      description: `Records of ${c.address} that ${consumerOf[c.id]} could not apply (undecodable, or refused by the database), with why and where they came from in headers. Kept forever; \`pnpm cli dlq list|redrive ${topics.dlq(c.address)}\`.`,
      contract: null,
      messageId: `${c.messageId}DeadLetter`,
      title: `A dead letter of ${c.address}`,
      senders: [consumerOf[c.id]],
      receivers: ['cli (dlq list, dlq redrive)'],
    });
  }

  const componentSchemas: Record<string, Json> = {};
  const dlqHeaders = liftSchema(DLQ_HEADERS_SCHEMA, componentSchemas);
  // W3C trace context, on every topic's records (optional: written when the producer traces, or passes it on).
  liftSchema(TRACE_HEADERS_SCHEMA, componentSchemas);
  const traceparent = (componentSchemas.TraceContextHeaders as { properties: Record<string, Json> }).properties[H.traceparent];
  // Inlined in every message's headers: the lifted object itself would be an unused component (spectral warns).
  delete componentSchemas.TraceContextHeaders;
  const messages: Record<string, Json> = {};
  for (const c of channels) {
    const recordHeaders: Json = {
      type: 'object',
      properties: {
        [H.contentType]: { type: 'string', const: 'application/json' },
        [H.schema]: c.contract
          ? { type: 'string', const: c.contract, description: 'The contract of the value, packages/contracts/schemas/<schema>.json.' }
          : { type: 'string' },
        [H.shopId]: { type: 'string', format: 'uuid' },
        [H.traceparent]: traceparent,
        ...Object.fromEntries(Object.entries(c.extraHeaders ?? {}).map(([name, description]) => [name, { type: 'string', description }])),
      },
      required: c.contract ? [H.contentType, H.schema, H.shopId] : [],
    };
    messages[c.messageId] = {
      name: c.messageId,
      title: c.title,
      contentType: 'application/json',
      // `type: object` beside the allOf: AsyncAPI 3 wants a headers schema to say it is an object (spectral's
      // asyncapi-3-headers-schema-type-object), which each part already is.
      headers: c.contract ? recordHeaders : { type: 'object', allOf: [dlqHeaders, recordHeaders] },
      payload: c.contract ? liftSchema(c.contract, componentSchemas) : { description: "The rejected record's value, byte for byte (it may not be JSON)." },
      bindings: { kafka: { key: uuidKey, bindingVersion: '0.5.0' } },
    };
  }
  const opId = (who: string, action: string, c: Channel) =>
    `${who.replace(/[^A-Za-z0-9]+(.)?/g, (_m, ch: string | undefined) => (ch ?? '').toUpperCase())}${action === 'send' ? 'Sends' : 'Receives'}${c.id[0].toUpperCase()}${c.id.slice(1)}`;
  const operations: Record<string, Json> = {};
  for (const c of channels) {
    for (const [action, who] of [...c.senders.map((s) => ['send', s] as const), ...c.receivers.map((r) => ['receive', r] as const)]) {
      operations[opId(who, action, c)] = {
        action,
        channel: { $ref: `#/channels/${c.id}` },
        summary: `${who} ${action === 'send' ? 'writes to' : 'reads'} ${c.address}`,
        description: `${who} ${action === 'send' ? 'writes' : 'reads'} records of ${c.address}: ${c.title}.`,
        messages: [{ $ref: `#/channels/${c.id}/messages/${c.messageId}` }],
      };
    }
  }
  return {
    asyncapi: '3.0.0',
    info: {
      title: 'Shopstream topics',
      version: '2026-04',
      description:
        'The Kafka topics Shopstream owns. Records are JSON, keyed by shop id, with `content-type`, `schema` and `shop_id` headers; `schema` names the record contract (a version only grows; a breaking change is a new version). A W3C `traceparent` header carries the trace of the span that produced a record (OpenTelemetry messaging conventions): a consumer continues the trace from it. The JSON Schema files are in packages/contracts/schemas. Partitioning: murmur2 of the key bytes, as the Java client (see each message key).',
      license: { name: 'MIT', url: 'https://opensource.org/license/mit' },
      tags: [
        { name: 'records', description: 'Topics a service writes and others read.' },
        { name: 'dead-letters', description: 'Records a consumer could not apply.' },
      ],
    },
    defaultContentType: 'application/json',
    servers: {
      kafka: {
        host: brokers?.[0] ?? '127.0.0.1:9092',
        protocol: 'kafka',
        description: brokers ? 'KAFKA_BROKERS of this deployment.' : "`pnpm infra up`'s broker; embedded mode keeps the same topics in PostgreSQL.",
      },
    },
    channels: Object.fromEntries(
      channels.map((c) => [
        c.id,
        { address: c.address, description: c.description, messages: { [c.messageId]: { $ref: `#/components/messages/${c.messageId}` } } },
      ]),
    ),
    operations,
    components: { messages, schemas: componentSchemas },
  };
}
