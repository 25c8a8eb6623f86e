import { contextOf, endWithError, getTracer, SpanKind, spanContextOf, traceparentOf, TRACEPARENT, withSpan, type Link, type Span } from '@shopstream/telemetry';
import type { BusRecord } from './port.js';
import { MAX_LINKS } from './tracedBus.js';

/** The spans of one batch a consumer handles (tracing on): one per record, and one for the batch's own work. */
export interface BatchTrace {
  /** Runs the batch's database work in the batch's span (the record's own when the batch holds one record). */
  run<T>(fn: () => Promise<T>): Promise<T>;
  /** The `traceparent` a record emitted while handling `cause` carries: the span of `cause`. */
  traceparentFor(cause: BusRecord): string | undefined;
  /** Ends every span, with the error that ended the batch when there is one. */
  end(error?: unknown): void;
}

/**
 * Starts the spans of a batch, after OpenTelemetry's messaging conventions: each record gets a `process <topic>`
 * span (kind CONSUMER) whose parent is the context in its `traceparent` header (a new trace when it has none), so
 * a trace runs on from the producer through every consumer; a batch of several records also gets a `process
 * <topic>` span linking each record's context, where the batch's transaction and its queries go.
 */
export function traceBatch(topic: string, group: string, system: string | undefined, records: BusRecord[]): BatchTrace {
  const tracer = getTracer();
  const common = {
    ...(system ? { 'messaging.system': system } : {}),
    'messaging.operation.type': 'process',
    'messaging.operation.name': 'process',
    'messaging.destination.name': topic,
    'messaging.consumer.group.name': group,
  };
  const spans = new Map<BusRecord, Span>();
  for (const r of records) {
    spans.set(
      r,
      tracer.startSpan(
        `process ${topic}`,
        {
          kind: SpanKind.CONSUMER,
          attributes: {
            ...common,
            'messaging.destination.partition.id': String(r.partition),
            'messaging.kafka.offset': Number(r.offset),
            ...(r.key !== null ? { 'messaging.kafka.message.key': r.key } : {}),
          },
        },
        contextOf(r.headers),
      ),
    );
  }
  let batchSpan: Span | undefined;
  if (records.length > 1) {
    const links: Link[] = [];
    for (const r of records) {
      if (links.length >= MAX_LINKS) break;
      const linked = spanContextOf(r.headers);
      if (linked) links.push({ context: linked });
    }
    batchSpan = tracer.startSpan(`process ${topic}`, {
      kind: SpanKind.CONSUMER,
      links,
      attributes: { ...common, 'messaging.batch.message_count': records.length, 'messaging.destination.partition.id': String(records[0].partition) },
    });
  }
  const workSpan = batchSpan ?? spans.values().next().value;
  return {
    run: (fn) => (workSpan ? withSpan(workSpan, fn) : fn()),
    traceparentFor(cause) {
      const span = spans.get(cause);
      return span ? traceparentOf(span) : cause.headers[TRACEPARENT];
    },
    end(error) {
      for (const s of [...spans.values(), ...(batchSpan ? [batchSpan] : [])]) {
        if (error === undefined) s.end();
        else endWithError(s, error);
      }
    },
  };
}
