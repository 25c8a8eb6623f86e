import { contractJsonSchema, DLQ_HEADERS_SCHEMA, headers as H, schemas } from '@shopstream/contracts';
import type { TopicNames } from '@shopstream/bus';

type Json = Record<string, any>;

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
  metricNameHeader?: boolean;
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

const uuidKey = { type: 'string', format: 'uuid', description: 'The shop id: records of one shop stay in one partition, in order.' };

/**
 * An AsyncAPI 3.0 document of every topic Shopstream owns (with this deployment's TOPIC_PREFIX): channels,
 * their keys and headers, messages whose payloads are the JSON Schemas of packages/contracts/schemas, and which
 * service sends and receives each. Served at /asyncapi.json beside /openapi.json.
 */
export function buildAsyncApi(topics: TopicNames, brokers?: string[]): Json {
  const channels: Channel[] = [
    {
      id: 'events',
      address: topics.events,
      description: 'Every accepted event, as ingest-api wrote it after resolving its contact: the source of truth of Activities. Kept forever.',
      contract: schemas.eventRecorded,
      messageId: 'eventRecorded',
      title: 'An event was recorded',
      senders: ['ingest-api', 'cli (dlq redrive)'],
      receivers: ['activity-projector'],
    },
    {
      id: 'metrics',
      address: topics.metrics,
      description: 'One metric event per new Activity; `id` equals the activity id (deduplicate a rare repeat by it). Derived: kept DERIVED_TOPIC_RETENTION_MS.',
      contract: schemas.metricEvent,
      messageId: 'metricEvent',
      title: 'A metric event',
      senders: ['activity-projector'],
      receivers: ['flow-matcher', 'analytics consumers'],
      metricNameHeader: true,
    },
    {
      id: 'flowTriggers',
      address: topics.flowTriggers,
      description: 'One record per (flow, metric event) a flow matched; `id` is UUIDv5 of both. Derived: kept DERIVED_TOPIC_RETENTION_MS.',
      contract: schemas.flowTriggered,
      messageId: 'flowTriggered',
      title: 'A flow was triggered',
      senders: ['flow-matcher'],
      receivers: ['analytics consumers', 'automation'],
    },
    {
      id: 'conversations',
      address: topics.conversations,
      description: 'Support conversations and their messages from upstream producers (`type` tells which). Kept forever.',
      contract: schemas.conversationRecord,
      messageId: 'conversationRecord',
      title: 'A conversation upserted, or a message created',
      senders: ['upstream producers', 'cli (conversations import)'],
      receivers: ['conversation-projector'],
    },
  ];
  const consumerOf: Record<string, string> = { events: 'activity-projector', metrics: 'flow-matcher', conversations: 'conversation-projector', flowTriggers: 'flow-triggers consumers' };
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
  const messages: Record<string, Json> = {};
  for (const c of channels) {
    const recordHeaders: Json = {
      type: 'object',
      properties: {
        [H.contentType]: { type: 'string', const: 'application/json' },
        [H.schema]: c.contract ? { type: 'string', const: c.contract, description: 'The contract of the value, packages/contracts/schemas/<schema>.json.' } : { type: 'string' },
        [H.shopId]: { type: 'string', format: 'uuid' },
        ...(c.metricNameHeader ? { [H.metricName]: { type: 'string', description: 'The metric name, to filter without parsing the value.' } } : {}),
      },
      required: c.contract ? [H.contentType, H.schema, H.shopId] : [],
    };
    messages[c.messageId] = {
      name: c.messageId,
      title: c.title,
      contentType: 'application/json',
      headers: c.contract ? recordHeaders : { allOf: [dlqHeaders, recordHeaders] },
      payload: c.contract ? liftSchema(c.contract, componentSchemas) : { description: 'The rejected record\'s value, byte for byte (it may not be JSON).' },
      bindings: { kafka: { key: uuidKey, bindingVersion: '0.5.0' } },
    };
  }
  const opId = (who: string, action: string, c: Channel) => `${who.replace(/[^A-Za-z0-9]+(.)?/g, (_m, ch: string | undefined) => (ch ?? '').toUpperCase())}${action === 'send' ? 'Sends' : 'Receives'}${c.id[0].toUpperCase()}${c.id.slice(1)}`;
  const operations: Record<string, Json> = {};
  for (const c of channels) {
    for (const [action, who] of [...c.senders.map((s) => ['send', s] as const), ...c.receivers.map((r) => ['receive', r] as const)]) {
      operations[opId(who, action, c)] = {
        action,
        channel: { $ref: `#/channels/${c.id}` },
        summary: `${who} ${action === 'send' ? 'writes to' : 'reads'} ${c.address}`,
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
        'The Kafka topics Shopstream owns. Records are JSON, keyed by shop id, with `content-type`, `schema` and `shop_id` headers; `schema` names the record contract (a version only grows; a breaking change is a new version). The JSON Schema files are in packages/contracts/schemas.',
      license: { name: 'MIT', url: 'https://opensource.org/license/mit' },
    },
    defaultContentType: 'application/json',
    servers: {
      kafka: { host: brokers?.[0] ?? '127.0.0.1:9092', protocol: 'kafka', description: brokers ? 'KAFKA_BROKERS of this deployment.' : '`pnpm infra up`\'s broker; embedded mode keeps the same topics in PostgreSQL.' },
    },
    channels: Object.fromEntries(
      channels.map((c) => [c.id, { address: c.address, description: c.description, messages: { [c.messageId]: { $ref: `#/components/messages/${c.messageId}` } } }]),
    ),
    operations,
    components: { messages, schemas: componentSchemas },
  };
}
