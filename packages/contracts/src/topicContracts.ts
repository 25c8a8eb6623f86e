import { z } from 'zod';
import { conversationRecordSchema, storedConversationRecordSchema } from './conversations.js';
import { eventRecordSchema, storedEventRecordSchema } from './records.js';
import { topicDefinitions } from './topicDefinitions.js';
import { schemas } from './topics.js';
import { headers as H } from './topics.js';

/** The headers of a dead letter on `<topic>.dlq`, beside the original record's own headers (kept as they were). */
export const deadLetterHeadersSchema = z
  .looseObject({
    [H.dlqReason]: z.string().min(1).describe('Why the record was rejected (at most 1,000 characters).'),
    [H.dlqSourceTopic]: z.string().min(1).describe('The topic the record came from.'),
    [H.dlqSourcePartition]: z.string().regex(/^\d+$/).describe('Its partition there.'),
    [H.dlqSourceOffset]: z.string().regex(/^\d+$/).describe('Its offset there.'),
  })
  .meta({ id: 'DeadLetterHeaders' });

export const DLQ_HEADERS_SCHEMA = 'dlq-headers.v1';

/**
 * The trace context any record may carry (every topic, dead letters included): W3C Trace Context's `traceparent`.
 * ingest-api writes the span of its send (a child of the HTTP request's, which continues the caller's
 * `traceparent` when it sent one); a projector writes, on what it emits, the span in which it handled the record
 * that caused it (stored with the outbox row); a consumer continues the trace from it. Present when the writer runs
 * with OpenTelemetry tracing on (OTEL_TRACES_EXPORTER=otlp), or passes on the header of the record it handled.
 */
export const traceContextHeadersSchema = z
  .looseObject({
    [H.traceparent]: z
      .string()
      .regex(/^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/)
      .optional()
      .describe(
        'W3C Trace Context: `00-<trace id, 32 hex>-<parent span id, 16 hex>-<flags, 2 hex>`, the span that produced this record (https://www.w3.org/TR/trace-context/#traceparent-header).',
      ),
  })
  .meta({ id: 'TraceContextHeaders' });

export const TRACE_HEADERS_SCHEMA = 'trace-context-headers.v1';

/**
 * Every record contract by the name its `schema` header carries (`event-recorded.v1`), and the dead-letter
 * and trace-context headers. A contract version only grows: a change that removes, renames or narrows a field is a new version
 * (`metric-event.v2`), published beside the old one (docs/versioning.md).
 */
export const topicContracts: Record<string, z.ZodType> = {
  // Still on `events` (kept forever) and still read: records written before event-recorded.v2.
  [schemas.eventRecorded]: eventRecordSchema,
  // Still written by upstream producers, and still read: conversations in plaintext.
  [schemas.conversationRecord]: conversationRecordSchema,
  ...Object.fromEntries(Object.values(topicDefinitions).map((t): [string, z.ZodType] => [t.schemaId, t.schema])),
  // `events` decodes with a transform that picks the form; its contract is the union of both forms.
  [schemas.eventRecordedV2]: storedEventRecordSchema,
  [schemas.conversationRecordV2]: storedConversationRecordSchema,
  [DLQ_HEADERS_SCHEMA]: deadLetterHeadersSchema,
  [TRACE_HEADERS_SCHEMA]: traceContextHeadersSchema,
};

/** A JSON Schema as zod writes one: a contract's, or a checked-in file's (packages/contracts/schemas). */
export type JsonSchema = z.core.JSONSchema.JSONSchema;
/** A subschema may also be `true` (anything) or `false` (nothing). */
type Subschema = z.core.JSONSchema._JSONSchema;

/**
 * The JSON Schema (2020-12) of a contract, as checked in under packages/contracts/schemas/<name>.json. The input
 * form: what a record may hold, extra fields allowed, so that adding a field within a version keeps old
 * consumers' validation passing.
 */
export function contractJsonSchema(name: string, target: 'draft-2020-12' | 'draft-7' = 'draft-2020-12'): JsonSchema {
  const schema = topicContracts[name];
  if (!schema) throw new Error(`No topic contract named ${name}`);
  const json = z.toJSONSchema(schema, { target, io: 'input', unrepresentable: 'any', reused: 'inline' });
  return target === 'draft-2020-12' ? { $schema: json.$schema, $id: `https://shopstream.dev/schemas/${name}.json`, title: name, ...json } : json;
}

/**
 * What a change from `before` to `after` takes away from a consumer of the same version: a property removed (or
 * renamed), a required property made optional, a type, enum or const narrowed, a bound tightened, a format
 * added, extra properties forbidden. Additions (a new optional property, a wider type) pass.
 */
export function compatibilityBreaks(before: JsonSchema, after: JsonSchema, at = '$'): string[] {
  const out: string[] = [];
  // draft-7's `definitions` is not in zod's JSON Schema type (2020-12's `$defs` is).
  const defs = (root: JsonSchema) => ({ ...root.$defs, ...(root.definitions as Record<string, JsonSchema> | undefined) });
  const beforeDefs = defs(before);
  const afterDefs = defs(after);
  // `true` and `false` as subschemas are taken as `{}`: they declare nothing to compare.
  const deref = (s: Subschema | undefined, d: Record<string, JsonSchema>): JsonSchema => {
    const node = s && typeof s === 'object' ? s : {};
    return typeof node.$ref === 'string' && /^#\/(\$defs|definitions)\//.test(node.$ref) ? deref(d[node.$ref.split('/').pop()!], d) : node;
  };
  const types = (n: JsonSchema): Set<string> | null => {
    if (n.type === undefined) return null;
    const t = new Set<string>(Array.isArray(n.type) ? n.type : [n.type]);
    if (t.has('number')) t.add('integer');
    return t;
  };
  const walk = (b0: Subschema | undefined, a0: Subschema | undefined, path: string) => {
    const b = deref(b0, beforeDefs);
    const a = deref(a0, afterDefs);
    const bt = types(b);
    const at2 = types(a);
    if (bt && (!at2 || [...bt].some((t) => !at2.has(t)))) {
      if (at2) out.push(`${path}: type narrowed from ${[...bt].join('|')} to ${[...at2].join('|')}`);
    } else if (!bt && at2) out.push(`${path}: type narrowed to ${[...at2].join('|')}`);
    const afterEnum = a.enum;
    if (Array.isArray(afterEnum) && (!Array.isArray(b.enum) || b.enum.some((v) => !afterEnum.includes(v)))) out.push(`${path}: enum narrowed`);
    if ('const' in a && (!('const' in b) || JSON.stringify(a.const) !== JSON.stringify(b.const))) out.push(`${path}: const changed`);
    if (a.format !== undefined && a.format !== b.format) out.push(`${path}: format ${a.format} added`);
    if (a.pattern !== undefined && a.pattern !== b.pattern) out.push(`${path}: pattern changed`);
    for (const [k, tighter] of [
      ['minLength', (x: number, y: number) => y > x],
      ['maxLength', (x: number, y: number) => y < x],
      ['minimum', (x: number, y: number) => y > x],
      ['maximum', (x: number, y: number) => y < x],
      ['minItems', (x: number, y: number) => y > x],
      ['maxItems', (x: number, y: number) => y < x],
    ] as const) {
      if (a[k] !== undefined && (b[k] === undefined || tighter(b[k], a[k]))) out.push(`${path}: ${k} tightened to ${a[k]}`);
    }
    if (a.additionalProperties === false && b.additionalProperties !== false) out.push(`${path}: extra properties now forbidden`);
    const bp = b.properties ?? {};
    const ap = a.properties ?? {};
    const breq = new Set<string>(b.required ?? []);
    const areq = new Set<string>(a.required ?? []);
    for (const k of Object.keys(bp)) {
      if (!(k in ap)) out.push(`${path}.${k}: removed`);
      else {
        if (breq.has(k) && !areq.has(k)) out.push(`${path}.${k}: no longer required`);
        walk(bp[k], ap[k], `${path}.${k}`);
      }
    }
    // A tuple's items (an array of schemas) are not compared.
    if (b.items && a.items && !Array.isArray(b.items) && !Array.isArray(a.items)) walk(b.items, a.items, `${path}[]`);
    for (const key of ['anyOf', 'oneOf'] as const) {
      const bs = b[key] ?? [];
      const as = a[key] ?? [];
      if (bs.length > 0 && as.length < bs.length) out.push(`${path}: ${key} lost alternatives`);
      bs.forEach((alt, i) => as[i] && walk(alt, as[i], `${path}.${key}[${i}]`));
    }
  };
  walk(before, after, at);
  return out;
}
