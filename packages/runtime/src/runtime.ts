import { createKafkaBus, createPgLogBus, topicNames, type Bus, type TopicNames } from '@shopstream/bus';
import { runningMode, type Env } from '@shopstream/config';
import { migrate, openDb, type Db } from '@shopstream/db';
import { ApiKeyStore, bootstrapApiKeys } from '@shopstream/http';
import { collectProcessMetrics, createLogger, type Logger } from '@shopstream/telemetry';

/** The ports a service is built from: one per process, shared by every service the process runs. */
export interface Runtime {
  env: Env;
  mode: 'embedded' | 'distributed';
  logger: Logger;
  db: Db;
  bus: Bus;
  topics: TopicNames;
  apiKeys: ApiKeyStore;
  close(): Promise<void>;
}

/**
 * Opens the database (the server at DATABASE_URL, else PGlite in DATA_DIR) and applies migrations,
 * opens the bus (Kafka at KAFKA_BROKERS, else the Postgres log on that database), creates the topics
 * Shopstream owns, and makes the BOOTSTRAP_API_KEYS exist.
 */
export async function openRuntime(env: Env, name: string): Promise<Runtime> {
  const logger = createLogger(name, env.LOG_LEVEL);
  collectProcessMetrics();
  const db = await openDb(
    env.DATABASE_URL ? { databaseUrl: env.DATABASE_URL, poolSize: env.DB_POOL_SIZE, applicationName: `shopstream-${name}` } : { dataDir: env.DATA_DIR },
  );
  try {
    await migrate(db, (m) => logger.info(m));
    const bus = env.KAFKA_BROKERS
      ? await createKafkaBus({
          brokers: env.KAFKA_BROKERS,
          clientId: `${env.KAFKA_CLIENT_ID}-${name}`,
          replicationFactor: env.KAFKA_REPLICATION,
          logger,
          lingerMs: env.INGEST_LINGER_MS,
          publishTimeoutMs: env.INGEST_PUBLISH_TIMEOUT_MS,
        })
      : await createPgLogBus({ db, logger });
    const topics = topicNames(env.TOPIC_PREFIX);
    const owned = [topics.events, topics.metrics, topics.flowTriggers, topics.conversations];
    await bus.ensureTopics([...owned, ...owned.map((t) => topics.dlq(t))].map((topic) => ({ topic, partitions: env.KAFKA_PARTITIONS })));
    const apiKeys = new ApiKeyStore(db, env.API_KEY_CACHE_TTL_MS);
    const n = await bootstrapApiKeys(apiKeys, env.BOOTSTRAP_API_KEYS);
    if (n > 0) logger.info({ keys: n }, 'bootstrap API keys ensured');
    return {
      env,
      mode: runningMode(env),
      logger,
      db,
      bus,
      topics,
      apiKeys,
      async close() {
        await bus.close().catch((e) => logger.error({ err: e }, 'closing the bus failed'));
        await db.close().catch((e) => logger.error({ err: e }, 'closing the database failed'));
      },
    };
  } catch (e) {
    await db.close().catch(() => {});
    throw e;
  }
}
