import { getTracer, SpanKind, spanContextOf, traceparentOf, TRACEPARENT, endWithError, type Link } from '@shopstream/telemetry';
import type { Bus, OutgoingRecord, PublishOptions } from './port.js';

/** Links a span keeps at most: a relay round of 5,000 records would otherwise carry 5,000. */
export const MAX_LINKS = 128;

/**
 * The bus with OpenTelemetry producer spans, for a process that exports spans (runtime wraps its bus only then:
 * with tracing off nothing here runs). Each publish is one `send <topic>` span (kind PRODUCER) in the active
 * context (ingest: the HTTP request's span); a record without a `traceparent` header gets this span's, so its
 * consumers continue the trace; a record that has one already (an outbox row a projector emitted, a dead letter)
 * keeps it, and the span links to it. Consuming is traced where records are handled (the projection runner).
 */
export function tracedBus(bus: Bus): Bus {
  const system = bus.messagingSystem;
  const traced: Bus = Object.create(bus) as Bus;
  traced.publish = async (topic: string, records: OutgoingRecord[], opts?: PublishOptions) => {
    const links: Link[] = [];
    for (const r of records) {
      if (links.length >= MAX_LINKS) break;
      const linked = r.headers ? spanContextOf(r.headers) : undefined;
      if (linked) links.push({ context: linked });
    }
    const span = getTracer().startSpan(`send ${topic}`, {
      kind: SpanKind.PRODUCER,
      links,
      attributes: {
        'messaging.system': system,
        'messaging.operation.type': 'send',
        'messaging.operation.name': 'send',
        'messaging.destination.name': topic,
        ...(records.length !== 1 ? { 'messaging.batch.message_count': records.length } : {}),
      },
    });
    const traceparent = traceparentOf(span);
    const out =
      traceparent === undefined
        ? records
        : records.map((r) => (r.headers?.[TRACEPARENT] !== undefined ? r : { ...r, headers: { ...r.headers, [TRACEPARENT]: traceparent } }));
    try {
      await bus.publish(topic, out, opts);
      span.end();
    } catch (e) {
      endWithError(span, e);
      throw e;
    }
  };
  return traced;
}
