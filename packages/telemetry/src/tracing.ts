import type { Attributes, Context, Link, Span, SpanContext, Tracer } from '@opentelemetry/api';
import type { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';

export type { Attributes, Context, Link, Span, SpanContext };

/** The record header and HTTP header that carry W3C trace context. */
export const TRACEPARENT = 'traceparent';

/** OpenTelemetry's SpanKind values (the API's enum, without loading the API). */
export const SpanKind = { SERVER: 1, CLIENT: 2, PRODUCER: 3, CONSUMER: 4 } as const;
/** OpenTelemetry's SpanStatusCode.ERROR. */
const STATUS_ERROR = 2;

type Api = typeof import('@opentelemetry/api');

/**
 * Set once tracing started: the OpenTelemetry API, SDK provider, tracer and propagator. The SDK and even the API
 * are loaded only then (a dynamic import in startTracing): with tracing off no OpenTelemetry module is loaded,
 * and no span, context or header is made anywhere.
 */
let on: { api: Api; provider: NodeTracerProvider; tracer: Tracer; w3c: W3CTraceContextPropagator } | undefined;

/** Whether this thread exports spans. Code on a hot path asks this first and does nothing more when it is false. */
export const tracingEnabled = (): boolean => on !== undefined;

/** The exporters OTEL_TRACES_EXPORTER names (a comma-separated list); unset means none here (see startTracing). */
function exportersOf(env: NodeJS.ProcessEnv): string[] {
  return (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter((s) => s !== '' && s !== 'none');
}

/**
 * Starts the OpenTelemetry SDK for this thread when OTEL_TRACES_EXPORTER=otlp (OTLP over HTTP, JSON, to
 * OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; sampler from OTEL_TRACES_SAMPLER and
 * OTEL_TRACES_SAMPLER_ARG; batching from OTEL_BSP_*; resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
 * the service name defaulting to `serviceName`). Unset, `none` or OTEL_SDK_DISABLED=true: nothing is loaded or
 * started (unlike the SDK's own default of `otlp`, an exporter must be asked for). Resolves to whether it started.
 */
export async function startTracing(serviceName: string, env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  if (on) return true;
  if ((env.OTEL_SDK_DISABLED ?? '').toLowerCase() === 'true') return false;
  const exporters = exportersOf(env);
  if (exporters.length === 0) return false;
  if (exporters.some((e) => e !== 'otlp')) throw new Error(`OTEL_TRACES_EXPORTER=${env.OTEL_TRACES_EXPORTER}: only otlp (OTLP over HTTP) or none is supported`);
  const [api, core, otlp, resources, sdk, semconv] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/core'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/semantic-conventions'),
  ]);
  const resource = resources
    .defaultResource()
    .merge(resources.resourceFromAttributes({ [semconv.ATTR_SERVICE_NAME]: serviceName }))
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const provider = new sdk.NodeTracerProvider({ resource, spanProcessors: [new sdk.BatchSpanProcessor(new otlp.OTLPTraceExporter())] });
  const w3c = new core.W3CTraceContextPropagator();
  // Sets the global tracer provider, the AsyncLocalStorage context manager and the W3C propagator.
  provider.register({ propagator: w3c });
  on = { api, provider, tracer: api.trace.getTracer('shopstream'), w3c };
  return true;
}

/** Exports the spans still buffered and stops the SDK (on shutdown); nothing when tracing is off. */
export async function stopTracing(): Promise<void> {
  const p = on?.provider;
  on = undefined;
  await p?.shutdown();
}

function started(): NonNullable<typeof on> {
  if (!on) throw new Error('tracing is off: ask tracingEnabled() first');
  return on;
}

/** The tracer; only when tracingEnabled(). */
export const getTracer = (): Tracer => started().tracer;

const getter = {
  keys: (c: Record<string, string | string[] | undefined>) => Object.keys(c),
  get: (c: Record<string, string | string[] | undefined>, k: string) => c[k],
};
const setter = { set: (c: Record<string, string>, k: string, v: string) => (c[k] = v) };

/** The context a `traceparent` value (HTTP or record header) continues; the root context when absent or malformed. */
export function contextOf(headers: Record<string, string | string[] | undefined>): Context {
  const { api, w3c } = started();
  if (headers[TRACEPARENT] === undefined) return api.ROOT_CONTEXT;
  return w3c.extract(api.ROOT_CONTEXT, headers, getter);
}

/** The span context a `traceparent` record header names, for a link; undefined when absent or malformed. */
export function spanContextOf(headers: Record<string, string>): SpanContext | undefined {
  if (headers[TRACEPARENT] === undefined) return undefined;
  return started().api.trace.getSpanContext(contextOf(headers));
}

/** The `traceparent` header value that continues this span. */
export function traceparentOf(span: Span): string | undefined {
  const { api, w3c } = started();
  const carrier: Record<string, string> = {};
  w3c.inject(api.trace.setSpan(api.ROOT_CONTEXT, span), carrier, setter);
  return carrier[TRACEPARENT];
}

/** Runs fn with `span` active: spans started meanwhile (its queries, its sends) are its children. */
export function withSpan<T>(span: Span, fn: () => T): T {
  const { api } = started();
  return api.context.with(api.trace.setSpan(api.context.active(), span), fn);
}

/** Whether a span is active here (a request's, a batch's). */
export const inSpan = (): boolean => on !== undefined && on.api.trace.getSpan(on.api.context.active()) !== undefined;

/** Marks a span failed (a 5xx answer), without an exception. */
export function setSpanError(span: Span, message?: string): void {
  span.setStatus({ code: STATUS_ERROR, message });
}

/** Ends a span with the error that ended its work: recorded as an exception, status ERROR. */
export function endWithError(span: Span, e: unknown): void {
  span.recordException(e instanceof Error ? e : String(e));
  span.setStatus({ code: STATUS_ERROR, message: e instanceof Error ? e.message : String(e) });
  span.end();
}
