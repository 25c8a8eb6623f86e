import { parentPort } from 'node:worker_threads';
import { ConfigError, loadEnv, type Env } from '@shopstream/config';
import { DataDirLockedError, workspaceServiceMigrations, type MigrationSource } from '@shopstream/db';
import { consumerStates, createLogger, registry, setConsumerDeadAfter, startTracing, stopTracing, trackConsumer, type Logger } from '@shopstream/telemetry';
import { liveGroupId } from '@shopstream/projections';
import { openRuntime, type Runtime, type RuntimeOptions } from './runtime.js';
import { exitOnSignals, serve, type StartedService } from './service.js';
import { migrationSourcesOf, type ServiceDefinition } from './defineService.js';

/** The consumers run elsewhere (a worker thread): the process stops them with its own services. */
export interface ConsumerThread {
  service: StartedService;
  /** Settles once every consumer there has started. */
  started: Promise<void>;
}

export interface RunServicesOptions {
  /** Run only this service of the list. */
  only?: string;
  /** The process's name in logs and metrics; default `only`, else `all-in-one`. */
  name?: string;
  /**
   * Where the consumers run when not in this thread: given the runtime, a thread that runs them, or
   * undefined to run them here. `onDied`: the thread ended on its own; the process exits 1.
   */
  consumersInThread?: (rt: Runtime, consumers: ServiceDefinition[], onDied: (err: unknown) => void) => ConsumerThread | undefined;
  /** After start: lines for the operator (the all-in-one's banner), given the runtime and the base URL. */
  banner?: (rt: Runtime, baseUrl: string) => Promise<string | undefined>;
  /**
   * This is a worker thread of a process whose main thread runs the HTTP port and the signals: no port, no
   * signals. It stops on the parent's `{ type: 'stop' }`, answers `{ type: 'metrics', id }` and
   * `{ type: 'consumers', id }` (its registry, its consumers' states) and posts `{ type: 'started' }`.
   */
  inThread?: boolean;
  /** The environment; default loadEnv(). */
  env?: Env;
  /**
   * The services' migration folders, from their declarations (`migrationSourcesOf`), when the list given is
   * every service; default: every services/<name>/migrations/ folder of the workspace (a process running one
   * service alone does not import its siblings, and every process must apply the same steps).
   */
  migrations?: MigrationSource[];
}

/** The process could not start within STARTUP_TIMEOUT_MS: the message names what it could not reach. */
export class StartupTimeoutError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StartupTimeoutError';
  }
}

/**
 * The whole life of a Shopstream process, the same for `pnpm start` (every service), one service
 * (`services/<name>/src/main.ts`) and the all-in-one's consumer thread:
 *
 * signals are held from the first line (a SIGTERM during start-up stops the service once it is up); the
 * database and bus are opened with retries, each attempt logged, until STARTUP_TIMEOUT_MS, then exit 1 with
 * one line naming what could not be reached; the HTTP services start, the port listens; then the consumers
 * join their groups (in this thread or in `consumersInThread`), each start retried with a backoff capped at
 * 30 s for as long as it takes (liveness fails after CONSUMER_DEAD_AFTER_MS meanwhile), each consumer then
 * kept alive by its supervisor. A signal drains requests, stops the services in reverse order, closes the
 * ports and exits 0; anything that escapes is one log line and exit 1.
 */
export async function runServices(services: ServiceDefinition[], opts: RunServicesOptions = {}): Promise<void> {
  const name = opts.name ?? opts.only ?? (services.length === 1 ? services[0].name : 'all-in-one');
  const signals = opts.inThread ? undefined : exitOnSignals();
  let logger: Logger | undefined;
  const fatal = (e: unknown, what: string): never => {
    const line = `${what}: ${e instanceof Error ? e.message : String(e)}`;
    if (logger) {
      logger.fatal({ err: e }, line);
      logger.flush();
    } else console.error(`${name}: ${line}`);
    // In a worker thread the main thread learns through the thread's exit code.
    process.exit(1);
  };
  if (!opts.inThread) {
    process.on('uncaughtException', (e) => fatal(e, 'uncaught exception'));
    process.on('unhandledRejection', (e) => fatal(e, 'unhandled rejection'));
  }
  try {
    await run(services, opts, name, signals, (l) => (logger = l));
  } catch (e) {
    fatal(e, e instanceof StartupTimeoutError ? 'could not start' : 'start-up failed');
  }
}

async function run(
  services: ServiceDefinition[],
  opts: RunServicesOptions,
  name: string,
  signals: ReturnType<typeof exitOnSignals> | undefined,
  gotLogger: (l: Logger) => void,
): Promise<void> {
  const env = opts.env ?? loadEnv();
  setConsumerDeadAfter(env.CONSUMER_DEAD_AFTER_MS);
  // Before anything opens: the bus, the database and the HTTP app are wrapped in spans only when it started.
  const tracing = await startTracing(name);
  const chosen = opts.only ? services.filter((s) => s.name === opts.only) : services;
  if (chosen.length === 0) throw new Error(`no service named "${opts.only}"`);
  let stopping = false;
  const port = opts.inThread ? parentPort : null;
  if (opts.inThread && !port) throw new Error('runServices({ inThread: true }) runs in a worker thread');
  // A stop asked during start-up (the parent's message in a thread; signals are held by exitOnSignals).
  let stopAsked: (() => void) | null = null;
  const stopRequested = new Promise<void>((r) => (stopAsked = r));
  port?.on('message', (m: { type: string; id?: number }) => {
    if (m.type === 'stop') {
      stopping = true;
      stopAsked?.();
    } else if (m.type === 'metrics') void registry.getMetricsAsJSON().then((metrics) => port.postMessage({ type: 'metrics', id: m.id, metrics }));
    else if (m.type === 'consumers') port.postMessage({ type: 'consumers', id: m.id, consumers: consumerStates() });
  });

  // Every process applies the same steps: the list's folders when it is every service, else the workspace's
  // service folders and those of the services given (a service declared outside services/, a test's fixture).
  const workspace = opts.migrations ?? (await workspaceServiceMigrations());
  const migrations = [...workspace, ...migrationSourcesOf(services).filter((m) => !workspace.some((w) => w.owner === m.owner))];
  const declaredTopics = services.flatMap((s) => [...s.topics.reads, ...s.topics.emits]);
  const rt = await openWithRetries(env, name, gotLogger, { migrations, topics: declaredTopics });
  gotLogger(rt.logger);
  if (tracing)
    rt.logger.info({ otlp_endpoint: process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? process.env.OTEL_EXPORTER_OTLP_ENDPOINT }, 'OpenTelemetry tracing on');
  const started: StartedService[] = [];
  const stopAll = async () => {
    for (const s of [...started].reverse()) await s.stop().catch((e) => rt.logger.error({ err: e, service: s.name }, 'stop failed'));
  };
  const http = chosen.filter((s) => s.kind === 'http');
  const consumers = chosen.filter((s) => s.kind === 'consumer');
  try {
    for (const s of http) started.push(await s.start(rt));
  } catch (e) {
    await stopAll();
    await rt.close();
    throw e;
  }

  let consumersStarted = consumers.length === 0;
  let stop: () => Promise<void>;
  let baseUrl = '';
  if (port) {
    let stopping_: Promise<void> | null = null;
    stop = () =>
      (stopping_ ??= (async () => {
        await stopAll();
        await rt.close();
      })());
  } else {
    const served = await serve(rt, started, {
      port: env.PORT,
      host: env.HOST,
      name,
      readiness: consumers.length > 0 ? { consumers: async () => consumersStarted } : {},
      projections: services.flatMap((s) => (s.projection ? [s.projection(env)] : [])),
    });
    stop = served.stop;
    baseUrl = env.PUBLIC_BASE_URL ?? `http://localhost:${served.server.port}`;
  }
  if (tracing) {
    const stopServices = stop;
    // The spans of the drain included, before the process exits.
    stop = () => stopServices().finally(() => stopTracing().catch((e) => rt.logger.warn({ err: e }, 'exporting the last spans failed')));
  }
  signals?.started(() => {
    stopping = true;
    return stop();
  });
  if (port) void stopRequested.then(() => stop().finally(() => port.close()));

  // Listening first, then the consumer groups: after a kill -9 a group waits out the dead member's session
  // before it lets the new one in, and the HTTP APIs need not wait for that.
  const thread = consumers.length > 0 ? opts.consumersInThread?.(rt, consumers, (err) => !stopping && void died(err)) : undefined;
  const died = async (err: unknown) => {
    rt.logger.fatal({ err }, `the consumer thread died: ${err instanceof Error ? err.message : String(err)}`);
    await stop().catch(() => {});
    process.exit(1);
  };
  if (thread) {
    started.push(thread.service);
    thread.started.then(
      () => {
        consumersStarted = true;
        rt.logger.info({ consumers: consumers.map((c) => c.name) }, 'consumers started in a worker thread');
      },
      () => {},
    );
  } else if (consumers.length > 0) {
    void (async () => {
      for (const c of consumers) {
        const s = await startUntilUp(c, rt, () => stopping);
        if (!s) return;
        // A stop that began while this one joined its group: stop it too (the stop has taken its list already).
        if (stopping) await s.stop().catch(() => {});
        else started.push(s);
      }
      consumersStarted = true;
      if (port && !stopping) port.postMessage({ type: 'started' });
    })();
  }

  if (opts.banner && !port) {
    const text = await opts.banner(rt, baseUrl);
    if (text) console.log(text);
  }
}

/**
 * Starts a consumer service, again after each failure with a backoff capped at 30 s, for as long as it takes
 * (the HTTP APIs of the process already serve): a database or broker away at start is waited for, logged
 * at each attempt; liveness fails once it has not run for CONSUMER_DEAD_AFTER_MS. Undefined when a stop came first.
 */
async function startUntilUp(c: ServiceDefinition, rt: Runtime, stopping: () => boolean): Promise<StartedService | undefined> {
  // Under its consumer group's name, as its supervisor tracks it once started: /healthz names the same group
  // whether a client fails inside its first join (@platformatic/kafka: the start throws) or after it (kafkajs).
  const group = c.projection ? liveGroupId(rt.env.CONSUMER_GROUP_PREFIX, c.projection(rt.env)) : c.name;
  const health = trackConsumer(group);
  try {
    for (let attempt = 1; ; attempt++) {
      if (stopping()) return undefined;
      try {
        return await c.start(rt);
      } catch (e) {
        const ms = Math.min(30_000, 1_000 * 2 ** (attempt - 1));
        rt.logger.error(
          { err: e, service: c.name, attempt, retry_in_ms: ms },
          `${c.name}: consumer of ${group} failed to start (${errorText(e)}); trying again in ${ms} ms`,
        );
        await new Promise((r) => setTimeout(r, ms));
      }
    }
  } finally {
    // From here on its consumers are tracked by their supervisors.
    health.remove();
  }
}

const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** Where the process's database and bus are, for a log line: host:port and database, never a password. */
export function targets(env: Env): string {
  let db: string;
  if (env.DATABASE_URL) {
    try {
      const u = new URL(env.DATABASE_URL);
      db = `PostgreSQL at ${u.hostname}:${u.port || '5432'}${u.pathname}`;
    } catch {
      db = 'PostgreSQL at DATABASE_URL';
    }
  } else db = `the embedded database in ${env.DATA_DIR}`;
  const bus = env.KAFKA_BROKERS ? `Kafka at ${env.KAFKA_BROKERS.join(',')}` : 'the Postgres-log bus on it';
  return `${db}, ${bus}`;
}

/** An error message with the database password, if it appears, blanked. */
function redacted(env: Env, message: string): string {
  if (!env.DATABASE_URL) return message;
  try {
    const password = decodeURIComponent(new URL(env.DATABASE_URL).password);
    return password ? message.split(password).join('***') : message;
  } catch {
    return message;
  }
}

/**
 * openRuntime, again after each failure with a backoff (1 s doubling, at most 15 s) until STARTUP_TIMEOUT_MS.
 * The deadline's timer is ref'd: while the database driver's sockets are unref'd, an await on them alone would
 * let Node exit 13 (an unsettled top-level await) without a word.
 */
async function openWithRetries(env: Env, name: string, gotLogger: (l: Logger) => void, options: RuntimeOptions): Promise<Runtime> {
  const deadline = Date.now() + env.STARTUP_TIMEOUT_MS;
  const where = targets(env);
  let lastError: unknown;
  let timedOut!: (e: StartupTimeoutError) => void;
  const timeout = new Promise<never>((_, reject) => (timedOut = reject));
  const timer = setTimeout(
    () =>
      timedOut(
        new StartupTimeoutError(
          `could not reach ${where} within STARTUP_TIMEOUT_MS=${env.STARTUP_TIMEOUT_MS}${lastError ? ` (${redacted(env, errorText(lastError))})` : ''}`,
          { cause: lastError },
        ),
      ),
    env.STARTUP_TIMEOUT_MS,
  );
  const logger = createLogger(name, env.LOG_LEVEL);
  gotLogger(logger);
  try {
    for (let attempt = 1; ; attempt++) {
      logger.info({ attempt }, `opening ${where} (attempt ${attempt})`);
      const opening = openRuntime(env, name, options);
      try {
        return await Promise.race([opening, timeout]);
      } catch (e) {
        // A setting that cannot work (KAFKA_SASL_MECHANISM without a password, a KAFKA_SSL_CA_FILE that is not there)
        // will not work on the next attempt either: say so at once. Nor will a DATA_DIR another running server holds:
        // a second `pnpm start` on it waited out STARTUP_TIMEOUT_MS (2 minutes) in retries before it said so.
        if (e instanceof ConfigError || e instanceof DataDirLockedError) throw e;
        if (e instanceof StartupTimeoutError) {
          // An attempt still in flight: whatever it opens later is closed, not leaked.
          void opening.then((rt) => rt.close()).catch(() => {});
          throw e;
        }
        lastError = e;
        const ms = Math.min(15_000, 1_000 * 2 ** (attempt - 1), Math.max(0, deadline - Date.now()));
        logger.warn({ attempt, retry_in_ms: ms }, `could not open ${where}: ${redacted(env, errorText(e))}; trying again in ${ms} ms`);
        await Promise.race([new Promise((r) => setTimeout(r, ms)), timeout]);
      }
    }
  } finally {
    clearTimeout(timer);
  }
}
