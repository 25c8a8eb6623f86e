import {
  BusUnavailableError,
  createKafkaBus,
  createPlatformaticKafkaBus,
  createPgLogBus,
  finiteRetention,
  ownedTopicSpecs,
  securityFailure,
  topicNames,
  tracedBus,
  type Bus,
  type KafkaSecurity,
  type OwnedTopicSpec,
  type TopicNames,
} from '@shopstream/bus';
import { groupInstanceId, kafkaConnection, runningMode, type Env } from '@shopstream/config';
import { migrate, openDb, type Db, type MigrationSource } from '@shopstream/db';
// The subpath, not the package's index: a process that only opens ports (a CLI command) loads no express.
import { ApiKeyStore, bootstrapApiKeys } from '@shopstream/http/apiKeys';
import { collectProcessMetrics, createLogger, gauge, tracingEnabled, type Logger } from '@shopstream/telemetry';
import { tracedDb } from './tracedDb.js';

/** The ports a service is built from: one per process, shared by every service the process runs. */
export interface Runtime {
  env: Env;
  mode: 'embedded' | 'distributed';
  logger: Logger;
  db: Db;
  bus: Bus;
  topics: TopicNames;
  apiKeys: ApiKeyStore;
  /** The Kafka settings the bus was opened with; absent on the Postgres log. */
  kafka?: KafkaSettings;
  close(): Promise<void>;
}

/**
 * The process's Kafka settings, resolved once from KAFKA_* and the producer's INGEST_* variables (TLS files and
 * SASL secrets read): what a service that opens a client of its own (ingest's large-body producer thread) opens
 * it with, so it does not read those variables again.
 */
export interface KafkaSettings {
  client: 'kafkajs' | 'platformatic';
  brokers: string[];
  security: KafkaSecurity;
  /** KAFKA_CLIENT_ID: a client's id is this, a dash and its own name. */
  clientIdPrefix: string;
  replicationFactor: number;
  lingerMs: number;
  publishTimeoutMs: number;
  stallMs: number;
}

/** The Kafka settings of an environment: undefined without KAFKA_BROKERS (the Postgres log). */
function kafkaSettings(env: Env): KafkaSettings | undefined {
  if (!env.KAFKA_BROKERS) return undefined;
  return {
    client: env.KAFKA_CLIENT,
    brokers: env.KAFKA_BROKERS,
    security: kafkaConnection(env),
    clientIdPrefix: env.KAFKA_CLIENT_ID,
    replicationFactor: env.KAFKA_REPLICATION,
    lingerMs: env.INGEST_LINGER_MS,
    publishTimeoutMs: env.INGEST_PUBLISH_TIMEOUT_MS,
    stallMs: env.INGEST_PUBLISH_STALL_MS,
  };
}

export interface RuntimeOptions {
  /**
   * Warn when a topic that must keep every record (source, dead letter) would delete some. Default true;
   * `pnpm cli topics ensure`, which is what the warning advises, turns it off.
   */
  checkRetention?: boolean;
  /** Where logs go: stdout for a service, stderr for a command whose stdout is its output (`--json`). */
  logTo?: 'stdout' | 'stderr';
  /** Embedded mode: connect to the database of a running `pnpm start` on DATA_DIR instead of refusing (CLI commands). */
  attach?: boolean;
  /** The services' migration folders (their declarations); default every services/<name>/migrations/ of the workspace. */
  migrations?: MigrationSource[];
  /** The topics the services declare (`defineService`): those beyond the contracts' are created like them. */
  topics?: readonly { name: string; role: 'source' | 'derived' }[];
}

/**
 * Opens the database (the server at DATABASE_URL, else the embedded PostgreSQL or PGlite in DATA_DIR) and applies migrations,
 * opens the bus (Kafka at KAFKA_BROKERS, else the Postgres log on that database), creates the topics
 * Shopstream owns, and makes the BOOTSTRAP_API_KEYS exist.
 */
export async function openRuntime(env: Env, name: string, options: RuntimeOptions = {}): Promise<Runtime> {
  const logger = createLogger(name, env.LOG_LEVEL, options.logTo === 'stderr' ? 2 : 1);
  collectProcessMetrics();
  const untracedDb = await openDb(
    env.DATABASE_URL
      ? {
          databaseUrl: env.DATABASE_URL,
          poolSize: env.DB_POOL_SIZE,
          applicationName: `shopstream-${name}`,
          preparedStatements: env.DATABASE_PREPARED_STATEMENTS,
        }
      : {
          dataDir: env.DATA_DIR,
          engine: env.EMBEDDED_DB,
          attach: options.attach,
          poolSize: env.DB_POOL_SIZE,
          applicationName: `shopstream-${name}`,
          preparedStatements: env.DATABASE_PREPARED_STATEMENTS,
          onEngine: (e) =>
            e.engine === 'postgres'
              ? logger.info(e, `embedded PostgreSQL ${e.how} in ${e.ms} ms (${e.why})`)
              : logger[e.why.startsWith('EMBEDDED_DB') || e.why.includes('holds a PGlite') ? 'info' : 'warn'](e, `embedded PGlite (${e.why})`),
        },
  );
  // Tracing on (startTracing): a span per statement and per publish. Off: the ports themselves, nothing added.
  const db = tracingEnabled() ? tracedDb(untracedDb, env.DATABASE_URL) : untracedDb;
  let opened: Bus | undefined;
  try {
    await migrate(untracedDb, (m) => logger.info(m), options.migrations);
    const settings = kafkaSettings(env);
    const kafka = settings && {
      brokers: settings.brokers,
      security: settings.security,
      clientId: `${settings.clientIdPrefix}-${name}`,
      replicationFactor: settings.replicationFactor,
      logger,
      lingerMs: settings.lingerMs,
      publishTimeoutMs: settings.publishTimeoutMs,
      stallMs: settings.stallMs,
      sessionTimeoutMs: env.KAFKA_SESSION_TIMEOUT_MS,
      fetchMinBytes: env.KAFKA_FETCH_MIN_BYTES,
      fetchMaxWaitMs: env.KAFKA_FETCH_MAX_WAIT_MS,
    };
    const untraced = kafka
      ? settings.client === 'platformatic'
        ? await createPlatformaticKafkaBus({ ...kafka, groupInstanceId: groupInstanceId(env, name), commitIntervalMs: env.KAFKA_COMMIT_INTERVAL_MS })
        : await createKafkaBus(kafka)
      : await createPgLogBus({
          db: untracedDb,
          logger,
          fetchMinRecords: env.PGLOG_FETCH_MIN_RECORDS,
          fetchMaxWaitMs: env.PGLOG_FETCH_MAX_WAIT_MS,
        });
    opened = untraced;
    const bus = tracingEnabled() ? tracedBus(untraced) : untraced;
    const topics = topicNames(env.TOPIC_PREFIX);
    const specs = ownedTopicSpecs(topics, { partitions: env.KAFKA_PARTITIONS, derivedRetentionMs: env.DERIVED_TOPIC_RETENTION_MS }, options.topics);
    await bus.ensureTopics(specs).catch((e: unknown) => {
      // The clients' own words for a refused password or an untrusted certificate are deep in what they throw.
      const security = securityFailure(e);
      throw security ? new BusUnavailableError(security, { cause: e }) : e;
    });
    // The Postgres log is Shopstream's own table, so its topics follow the roles without an operator's step
    // (an embedded install never runs `topics ensure`). A Kafka cluster is the operator's: only warn there.
    if (bus.selfManaged) {
      for (const c of await bus.alignTopicConfigs(specs)) logger.info(c, `topic ${c.topic}: ${c.name} ${c.from} -> ${c.to}`);
    }
    if (options.checkRetention ?? true) await checkTopicRetention(bus, specs, logger);
    const apiKeys = new ApiKeyStore(db, env.API_KEY_CACHE_TTL_MS);
    const n = await bootstrapApiKeys(apiKeys, env.BOOTSTRAP_API_KEYS);
    if (n > 0) logger.info({ keys: n }, 'bootstrap API keys ensured');
    logger.debug({ db: untracedDb.description, bus: untraced.description }, `opened ${untracedDb.description} and ${untraced.description}`);
    return {
      env,
      mode: runningMode(env),
      logger,
      db,
      bus,
      topics,
      apiKeys,
      ...(settings ? { kafka: settings } : {}),
      async close() {
        await bus.close().catch((e) => logger.error({ err: e }, 'closing the bus failed'));
        await db.close().catch((e) => logger.error({ err: e }, 'closing the database failed'));
      },
    };
  } catch (e) {
    // A start that is tried again must not leave the failed attempt's clients (and their timers) behind.
    await opened?.close().catch(() => {});
    await db.close().catch(() => {});
    throw e;
  }
}

const finiteRetentionGauge = gauge(
  'shopstream_topic_finite_retention',
  'Whether a topic that must keep every record (source, dead letter) is set to delete some (1) or keeps all (0), as read at start.',
  ['topic'],
);

export interface FiniteRetention {
  topic: string;
  config: string;
  value: string;
}

/**
 * Warns, once per setting at start, when a topic that must keep every record (source, dead letter) is set
 * to delete some, by its own setting or by the broker's default; returns what it warned about.
 */
export async function checkTopicRetention(bus: Bus, specs: OwnedTopicSpec[], logger: Logger): Promise<FiniteRetention[]> {
  const kept = specs.filter((s) => s.role !== 'derived').map((s) => s.topic);
  let configs: Record<string, Record<string, string>>;
  try {
    configs = await bus.topicConfigs(kept);
  } catch (e) {
    // A check, not a dependency: a broker that refuses DescribeConfigs (ACLs) must not keep a service down.
    logger.warn({ err: e }, "could not read the topics' retention; run `pnpm cli topics ensure` to check it");
    return [];
  }
  const found: FiniteRetention[] = [];
  for (const topic of kept) {
    const finite = finiteRetention(configs[topic] ?? {});
    finiteRetentionGauge.set({ topic }, finite.length > 0 ? 1 : 0);
    for (const { name, value } of finite) {
      found.push({ topic, config: name, value });
      logger.warn(
        { topic, config: name, value },
        `topic ${topic} has ${name}=${value}: the log deletes records that projections are rebuilt from; run \`pnpm cli topics ensure\` to keep them all`,
      );
    }
  }
  return found;
}
