import { destination, pino, type Logger } from 'pino';
import { isMainThread } from 'node:worker_threads';
import client from 'prom-client';

export type { Logger };
export type { Counter, Gauge, Histogram } from 'prom-client';

/** JSON lines on stdout. Secrets never reach a log line: `authorization` is redacted wherever it appears. */
/** JSON lines to stdout (a service), or to stderr (a command, whose stdout is its output). */
export function createLogger(service: string, level = process.env.LOG_LEVEL ?? 'info', fd: 1 | 2 = 1): Logger {
  return pino(
    {
      level,
      base: { service },
      redact: { paths: ['req.headers.authorization', 'headers.authorization', '*.authorization', 'apiKey', 'secret'], censor: '[redacted]' },
    },
    // Asynchronous: lines logged while a write is in flight go out together in the next one, instead of a
    // write(2) per line (one per request at info). pino flushes what is pending when the process exits.
    destination({ dest: fd, sync: false }),
  );
}

export const registry = client.register;

type MetricsJson = Awaited<ReturnType<typeof registry.getMetricsAsJSON>>;
const sources: (() => Promise<MetricsJson>)[] = [];
/**
 * Metrics kept elsewhere in this process (a worker thread's own registry) that /metrics serves with this
 * thread's: each source answers its registry's `getMetricsAsJSON()`; series of the same name are summed.
 */
export function addMetricsSource(source: () => Promise<MetricsJson>): void {
  sources.push(source);
}

const scrapeHooks = new Set<() => Promise<void>>();
/** How long /metrics waits for a hook (a database query) before it answers with what it has. */
const SCRAPE_HOOK_TIMEOUT_MS = 2_000;
/**
 * Work run before each exposition: gauges read from the database (the outbox's backlog, rebuilds) are set
 * there, only when something asks for them. A hook that fails or takes over 2 s leaves its gauges as they
 * were: /metrics never fails or hangs on the database. Returns the hook's removal.
 */
export function onScrape(hook: () => Promise<void>): () => void {
  scrapeHooks.add(hook);
  return () => scrapeHooks.delete(hook);
}

async function runScrapeHooks(): Promise<void> {
  await Promise.all(
    [...scrapeHooks].map(
      (hook) =>
        new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, SCRAPE_HOOK_TIMEOUT_MS);
          hook().then(
            () => (clearTimeout(timer), resolve()),
            () => (clearTimeout(timer), resolve()),
          );
        }),
    ),
  );
}

/** The exposition /metrics serves: this thread's registry, plus every source added, merged. */
export async function metricsText(): Promise<string> {
  if (scrapeHooks.size > 0) await runScrapeHooks();
  if (sources.length === 0) return registry.metrics();
  const others = await Promise.all(sources.map((s) => s().catch(() => [] as MetricsJson)));
  return client.AggregatorRegistry.aggregate([await registry.getMetricsAsJSON(), ...others]).metrics();
}

let defaultsCollected = false;
/** Process metrics (CPU, memory, event-loop lag) once per process, however many services share it. */
export function collectProcessMetrics(): void {
  // A worker thread shares its process with the main thread, which reports the process's figures.
  if (defaultsCollected || !isMainThread) return;
  defaultsCollected = true;
  client.collectDefaultMetrics({ register: registry });
  // prom-client also exports the sums of its nodejs_active_{handles,requests,resources} gauges as gauges named
  // `*_total`, a suffix Prometheus keeps for counters (`promtool check metrics` refuses them). The per-type gauges
  // stay; a total is `sum(nodejs_active_handles)`.
  for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) registry.removeSingleMetric(name);
}

// Several services may live in one process (all-in-one); each asks for the same metric by name,
// and must get the one that exists rather than a "metric already registered" error.
function getOrCreate<T>(name: string, make: () => T): T {
  return (registry.getSingleMetric(name) as T | undefined) ?? make();
}

export function counter<L extends string>(name: string, help: string, labelNames: readonly L[] = []): client.Counter<L> {
  return getOrCreate(name, () => new client.Counter({ name, help, labelNames: labelNames as L[] }));
}

export function gauge<L extends string>(name: string, help: string, labelNames: readonly L[] = []): client.Gauge<L> {
  return getOrCreate(name, () => new client.Gauge({ name, help, labelNames: labelNames as L[] }));
}

export function histogram<L extends string>(
  name: string,
  help: string,
  labelNames: readonly L[] = [],
  buckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
): client.Histogram<L> {
  return getOrCreate(name, () => new client.Histogram({ name, help, labelNames: labelNames as L[], buckets }));
}

export {
  trackConsumer,
  consumerStates,
  allConsumerStates,
  addConsumerStateSource,
  setConsumerDeadAfter,
  deadConsumers,
  type ConsumerState,
  type DeadConsumer,
} from './consumerHealth.js';

export {
  TRACEPARENT,
  SpanKind,
  startTracing,
  stopTracing,
  tracingEnabled,
  getTracer,
  contextOf,
  spanContextOf,
  traceparentOf,
  withSpan,
  inSpan,
  setSpanError,
  endWithError,
  type Attributes,
  type Link,
  type Span,
} from './tracing.js';
