import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type SpanContext,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';

export { SpanKind, SpanStatusCode, context, trace, type Attributes, type Context, type Link, type Span, type SpanContext };

/** The record header and HTTP header that carry W3C trace context. */
export const TRACEPARENT = 'traceparent';

let provider: NodeTracerProvider | undefined;
let tracer: Tracer | undefined;
const w3c = new W3CTraceContextPropagator();

/**
 * Whether this thread exports spans. Code on a hot path asks this first and does nothing more when it is
 * false: with tracing off no span, context or header is made anywhere.
 */
export const tracingEnabled = (): boolean => tracer !== undefined;

/** The exporters OTEL_TRACES_EXPORTER names (a comma-separated list); unset means none here (see startTracing). */
function exportersOf(env: NodeJS.ProcessEnv): string[] {
  return (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter((s) => s !== '' && s !== 'none');
}

/** Tracing was asked for with an exporter this build does not ship. */
export class UnsupportedTraceExporterError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UnsupportedTraceExporterError';
  }
}

/**
 * Starts the OpenTelemetry SDK for this thread when OTEL_TRACES_EXPORTER=otlp (OTLP over HTTP, JSON, to
 * OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; sampler from OTEL_TRACES_SAMPLER and
 * OTEL_TRACES_SAMPLER_ARG; resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, the service name
 * defaulting to `serviceName`). Unset, `none` or OTEL_SDK_DISABLED=true: nothing is started and the process
 * pays nothing (unlike the SDK's own default of `otlp`, an exporter must be asked for). Returns whether it started.
 * Once per thread; later calls return the first one's answer.
 */
export function startTracing(serviceName: string, env: NodeJS.ProcessEnv = process.env): boolean {
  if (provider) return true;
  if ((env.OTEL_SDK_DISABLED ?? '').toLowerCase() === 'true') return false;
  const exporters = exportersOf(env);
  if (exporters.length === 0) return false;
  const unknown = exporters.filter((e) => e !== 'otlp');
  if (unknown.length > 0) throw new UnsupportedTraceExporterError(`OTEL_TRACES_EXPORTER=${env.OTEL_TRACES_EXPORTER}: only otlp (OTLP over HTTP) or none is supported`);
  const resource = defaultResource()
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: serviceName }))
    .merge(detectResources({ detectors: [envDetector] }));
  provider = new NodeTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())] });
  // Sets the global tracer provider, the AsyncLocalStorage context manager and the W3C propagator.
  provider.register({ propagator: w3c });
  tracer = trace.getTracer('shopstream');
  return true;
}

/** Exports the spans still buffered and stops the SDK (on shutdown); nothing when tracing is off. */
export async function stopTracing(): Promise<void> {
  const p = provider;
  if (!p) return;
  provider = undefined;
  tracer = undefined;
  await p.shutdown();
}

/** Exports the spans buffered so far (a test, before it reads them). */
export async function flushTracing(): Promise<void> {
  await provider?.forceFlush();
}

/** The tracer; only when tracingEnabled(). */
export function getTracer(): Tracer {
  if (!tracer) throw new Error('tracing is off: ask tracingEnabled() first');
  return tracer;
}

const getter = {
  keys: (c: Record<string, string | string[] | undefined>) => Object.keys(c),
  get: (c: Record<string, string | string[] | undefined>, k: string) => c[k],
};
const setter = { set: (c: Record<string, string>, k: string, v: string) => (c[k] = v) };

/** The context a `traceparent` value (HTTP or record header) continues; ROOT_CONTEXT when absent or malformed. */
export function contextOf(headers: Record<string, string | string[] | undefined>): Context {
  if (headers[TRACEPARENT] === undefined) return ROOT_CONTEXT;
  return w3c.extract(ROOT_CONTEXT, headers, getter);
}

/** The span context a `traceparent` record header names, for a link; undefined when absent or malformed. */
export function spanContextOf(headers: Record<string, string>): SpanContext | undefined {
  if (headers[TRACEPARENT] === undefined) return undefined;
  return trace.getSpanContext(contextOf(headers));
}

/** The `traceparent` header value that continues this span (undefined for a span of an invalid context). */
export function traceparentOf(span: Span): string | undefined {
  const carrier: Record<string, string> = {};
  w3c.inject(trace.setSpan(ROOT_CONTEXT, span), carrier, setter);
  return carrier[TRACEPARENT];
}

/** Ends a span with the error that ended its work: recorded as an exception, status ERROR. */
export function endWithError(span: Span, e: unknown): void {
  span.recordException(e instanceof Error ? e : String(e));
  span.setStatus({ code: SpanStatusCode.ERROR, message: e instanceof Error ? e.message : String(e) });
  span.end();
}

/** Runs fn in a new active span that ends when fn settles (status ERROR when it throws); fn alone when tracing is off. */
export async function inSpan<T>(name: string, options: { kind?: SpanKind; attributes?: Attributes; links?: Link[] }, fn: (span?: Span) => Promise<T>): Promise<T> {
  if (!tracer) return fn();
  return tracer.startActiveSpan(name, options, async (span) => {
    try {
      const r = await fn(span);
      span.end();
      return r;
    } catch (e) {
      endWithError(span, e);
      throw e;
    }
  });
}

/** The active context, for a span started outside startActiveSpan. */
export const activeContext = (): Context => context.active();
export { ROOT_CONTEXT, propagation };
