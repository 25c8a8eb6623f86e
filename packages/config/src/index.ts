import { hostname } from 'node:os';
import { z } from 'zod';

const csv = z.string().transform((s) =>
  s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean),
);
const int = (def: number) => z.coerce.number().int().positive().default(def);

/**
 * Every environment variable any service reads, with its default. Each service takes the section it
 * needs from the parsed object; the README's configuration table is written from this schema.
 */
export const envSchema = z.object({
  // Where the data lives. Both unset: embedded mode (a PostgreSQL of its own in DATA_DIR, Postgres-log bus).
  DATABASE_URL: z.string().url().optional(),
  DATA_DIR: z.string().default('./.data'),
  // The embedded database: PostgreSQL from the npm registry's binaries, or PGlite; auto keeps DATA_DIR's own.
  EMBEDDED_DB: z.enum(['auto', 'postgres', 'pglite']).default('auto'),
  DB_POOL_SIZE: int(10),
  // Statements that repeat run as server-side prepared statements; false for a pooler in transaction mode that
  // does not keep them per client (PgBouncer before 1.21): docs/operations.md#prepared-statements.
  DATABASE_PREPARED_STATEMENTS: z
    .enum(['true', 'false'])
    .default('true')
    .transform((v) => v === 'true'),
  KAFKA_BROKERS: csv.optional(),
  // The Kafka client behind the bus port: @platformatic/kafka (the default: maintained, pure TypeScript, static
  // membership, every `pnpm faults` goal in one full run, faults/README.md) or kafkajs (unmaintained; its public API
  // only). Both pass the same conformance suite and partition alike (docs/operations.md#kafka-client).
  KAFKA_CLIENT: z.enum(['kafkajs', 'platformatic']).default('platformatic'),
  KAFKA_CLIENT_ID: z.string().default('shopstream'),
  // How to reach a managed or secured cluster (docs/operations.md#kafka-connection): TLS (system CAs unless
  // KAFKA_SSL_CA_FILE), a client certificate for mutual TLS, SASL. A _FILE variant reads a mounted secret.
  KAFKA_SSL: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
  KAFKA_SSL_CA_FILE: z.string().optional(),
  KAFKA_SSL_CERT_FILE: z.string().optional(),
  KAFKA_SSL_KEY_FILE: z.string().optional(),
  KAFKA_SASL_MECHANISM: z.enum(['plain', 'scram-sha-256', 'scram-sha-512', 'oauthbearer']).optional(),
  KAFKA_SASL_USERNAME: z.string().optional(),
  KAFKA_SASL_USERNAME_FILE: z.string().optional(),
  KAFKA_SASL_PASSWORD: z.string().optional(),
  KAFKA_SASL_PASSWORD_FILE: z.string().optional(),
  // OAUTHBEARER's tokens: from a token endpoint by the client credentials grant, or from a file kept current.
  KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL: z.string().url().optional(),
  KAFKA_SASL_OAUTHBEARER_CLIENT_ID: z.string().optional(),
  KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET: z.string().optional(),
  KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE: z.string().optional(),
  KAFKA_SASL_OAUTHBEARER_SCOPE: z.string().optional(),
  KAFKA_SASL_OAUTHBEARER_TOKEN_FILE: z.string().optional(),
  KAFKA_SASL_OAUTHBEARER_EXTENSIONS: z.string().optional(),
  KAFKA_PARTITIONS: int(12),
  KAFKA_REPLICATION: int(1),
  TOPIC_PREFIX: z.string().default(''),
  // How long derived topics (metrics, flow-triggers) keep records; source and dead-letter topics keep all.
  DERIVED_TOPIC_RETENTION_MS: int(30 * 24 * 60 * 60 * 1000),
  // HTTP
  HOST: z.string().default('0.0.0.0'),
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  PUBLIC_BASE_URL: z.string().url().optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  SHUTDOWN_TIMEOUT_MS: int(15_000),
  // How long a service keeps trying to open its database and bus at start before it exits 1 with the cause.
  STARTUP_TIMEOUT_MS: int(120_000),
  // How long a client may take: the headers, the whole request (body included), an idle keep-alive connection.
  HTTP_HEADERS_TIMEOUT_MS: int(10_000),
  HTTP_REQUEST_TIMEOUT_MS: int(60_000),
  HTTP_KEEP_ALIVE_TIMEOUT_MS: int(65_000),
  // Connections waiting to be accepted (the kernel caps it at net.core.somaxconn).
  HTTP_BACKLOG: int(4096),
  // Whom to believe about the client: express's `trust proxy` (unset: nobody, X-Forwarded-* ignored) and
  // whether a client's X-Request-Id becomes the request id (else one is always generated).
  TRUST_PROXY: z.string().optional(),
  TRUST_REQUEST_ID: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
  // /status and /status.json are open, as /metrics is, unless this is set: then they ask for it (a Bearer
  // header or ?token=).
  STATUS_TOKEN: z.string().min(1).optional(),
  // Auth
  BOOTSTRAP_API_KEYS: z.string().optional(),
  API_KEY_CACHE_TTL_MS: int(5_000),
  // Ingest
  INGEST_LINGER_MS: z.coerce.number().int().min(0).default(2),
  INGEST_PUBLISH_TIMEOUT_MS: int(5_000),
  // A Kafka send in flight longer than this: the broker is stalled, new writes are 503 at once (@shopstream/bus: kafka/publisher.ts).
  INGEST_PUBLISH_STALL_MS: int(1_000),
  // Events per API key and shop on the event endpoints (a bulk request counts its events), across every
  // replica: a burst per second and a steady rate per minute. 0 turns that limit off.
  INGEST_RATE_LIMIT_PER_SECOND: z.coerce.number().int().min(0).default(350),
  INGEST_RATE_LIMIT_PER_MINUTE: z.coerce.number().int().min(0).default(3_500),
  // Tokens a replica leases from the shared bucket in Postgres at a time.
  INGEST_RATE_LIMIT_CHUNK: int(50),
  // How long a request waits for a lease before its replica fails open on a local bucket.
  INGEST_RATE_LIMIT_LEASE_TIMEOUT_MS: int(500),
  // How long the 429 of a key already known over its limit is held before it is sent (0: at once), so a runaway
  // producer is slowed where it runs (packages/http/src/heldAnswers.ts).
  INGEST_RATE_LIMIT_HOLD_MS: z.coerce.number().int().min(0).max(10_000).default(500),
  // Export
  CURSOR_SECRET: z.string().min(16).optional(),
  EXPORT_RATE_LIMIT_PER_MINUTE: int(60),
  // Consumers
  CONSUMER_GROUP_PREFIX: z.string().default('shopstream.'),
  // How long a consumer group waits for a member that stopped heartbeating (a kill -9) before it moves on.
  // On @platformatic/kafka a process restarted after a kill -9 rejoins at once as its static member
  // (KAFKA_GROUP_INSTANCE_ID); on kafkajs (no static membership) its new member waits out this session.
  KAFKA_SESSION_TIMEOUT_MS: z.coerce.number().int().min(6_000).default(8_000),
  // A consumer's fetch is answered once it has this many bytes or waited KAFKA_FETCH_MAX_WAIT_MS (Kafka's
  // fetch.min.bytes and fetch.max.wait.ms): fewer, larger batches at moderate rates, at most the wait added to a
  // quiet topic's latency per hop. At most 1 s: kafkajs's heartbeats wait behind a fetch on its connection.
  KAFKA_FETCH_MIN_BYTES: z.coerce.number().int().min(1).default(65_536),
  KAFKA_FETCH_MAX_WAIT_MS: z.coerce.number().int().min(1).max(1_000).default(100),
  // The Postgres-log bus (the embedded mode) the same way: a consumer takes its records once this many wait, or once the
  // first of them waited PGLOG_FETCH_MAX_WAIT_MS (0: each append at once).
  PGLOG_FETCH_MIN_RECORDS: z.coerce.number().int().min(1).default(100),
  PGLOG_FETCH_MAX_WAIT_MS: z.coerce.number().int().min(0).max(1_000).default(100),
  // KAFKA_CLIENT=platformatic: how long a handled batch's position may wait to be committed with the other partitions'
  // in one OffsetCommit (one a second per consumer under load instead of one per batch); 0 commits each batch.
  KAFKA_COMMIT_INTERVAL_MS: z.coerce.number().int().min(0).max(10_000).default(1_000),
  // The consumers' group.instance.id (static membership, KAFKA_CLIENT=platformatic; kafkajs has none): unset,
  // `<service>@<host>:<PORT>` (none when PORT is 0); `none`: every start joins as a new member.
  KAFKA_GROUP_INSTANCE_ID: z.string().min(1).optional(),
  FLOW_REFRESH_MS: int(2_000),
  // Liveness: /healthz answers 503 once a consumer of the process has not been running for this long (its
  // supervisor could not bring it back), so an orchestrator restarts the process.
  CONSUMER_DEAD_AFTER_MS: int(60_000),
  // `pnpm start` with every service on a PostgreSQL server (embedded, or DATABASE_URL's): the consumers in a worker
  // thread of their own, off the event loop that answers HTTP, when the log is Kafka (auto) or on any bus (on); off
  // keeps them on that loop, as auto does on the Postgres-log bus. PGlite: always on it.
  CONSUMER_THREAD: z.enum(['auto', 'on', 'off']).default('auto'),
  // That thread's nice value (Linux; 0: the process's priority): when the cores are short, HTTP is answered first
  // and the consumers (their lag) take what is left.
  CONSUMER_THREAD_NICE: z.coerce.number().int().min(0).max(19).default(10),
  // Abuse costs the abuser (packages/http/src/authFailures.ts, services/ingest-api/src/largeBodies.ts).
  // Failed API key look-ups per client address (IPv6: per /64) before 429, and how fast they come back; 0: no limit.
  AUTH_FAILURE_BURST: z.coerce.number().int().min(0).default(20),
  AUTH_FAILURES_PER_MINUTE: z.coerce.number().int().min(0).default(60),
  // Ingest bodies over INGEST_LARGE_BODY_BYTES (or of unknown length) read and handled at most
  // INGEST_MAX_LARGE_BODIES at a time per process; one that waits INGEST_LARGE_BODY_WAIT_MS gets 503 + Retry-After.
  INGEST_LARGE_BODY_BYTES: z.coerce
    .number()
    .int()
    .min(0)
    .default(1024 * 1024),
  INGEST_MAX_LARGE_BODIES: z.coerce.number().int().min(1).default(2),
  INGEST_LARGE_BODY_WAIT_MS: z.coerce.number().int().min(0).default(2_000),
  // And at most this many bytes of them taken per second per process (0: no limit): the cores that parse them and
  // the broker that writes them are the small requests' too.
  INGEST_LARGE_BODY_BYTES_PER_SECOND: z.coerce
    .number()
    .int()
    .min(0)
    .default(8 * 1024 * 1024),
  // Large ingest bodies are parsed, validated and serialised in INGEST_BODY_WORKERS worker threads (0: on the event
  // loop, as small ones are).
  INGEST_BODY_WORKERS: z.coerce.number().int().min(0).default(1),
  // With Kafka and body workers: the records of those large bodies are published from a thread of their own with a
  // producer of its own (the same adapter and settings), so their sends are encoded off the event loop and small
  // requests' sends do not wait behind them. false: published by the process's producer.
  // The nice value (0-19) of those threads (Linux): on a busy machine the event loop that answers small requests runs
  // first and large bodies wait. 0: the process's own priority.
  INGEST_WORKER_NICE: z.coerce.number().int().min(0).max(19).default(10),
  INGEST_LARGE_BODY_PRODUCER: z
    .enum(['true', 'false'])
    .default('true')
    .transform((v) => v === 'true'),
  // Above 0: a request's records weighing more are published in parts of about this many bytes, one after the
  // other, so a 6 MB bulk's send does not hold the producer and the event loop at once; a 503 part way through may
  // leave some of its events recorded. 0 (default): one publish, all or nothing.
  INGEST_SEND_PART_BYTES: z.coerce.number().int().min(0).default(0),
  // Personal data (docs/privacy.md). The master keys that wrap each contact's data key: base64 of 32 bytes (or 64
  // hex digits), several separated by commas, the first current; or a file of them, one per line. Neither: the
  // embedded mode makes one in DATA_DIR; the distributed mode keeps one in the database and warns at start.
  PRIVACY_MASTER_KEY: z.string().optional(),
  PRIVACY_MASTER_KEY_FILE: z.string().optional(),
  // How often the erasure worker (in query-api) looks for deletion jobs it was not told about.
  ERASURE_POLL_MS: int(1_000),
});
export type Env = z.infer<typeof envSchema>;

export class ConfigError extends Error {}

export function loadEnv(env: NodeJS.ProcessEnv = process.env): Env {
  // A variable set to nothing (`KAFKA_BROKERS=` in a compose file or a shell) counts as unset, as the README
  // says, instead of as an empty broker list or an invalid URL.
  const given = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v.trim() !== ''));
  const parsed = envSchema.safeParse(given);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`);
    throw new ConfigError(`Invalid configuration:\n${lines.join('\n')}`);
  }
  return parsed.data;
}

/**
 * Who this instance of a service is across its restarts, for its consumers' static group membership
 * (group.instance.id, KIP-345): KAFKA_GROUP_INSTANCE_ID, else `<service>@<host>:<PORT>` (two instances of a
 * service on one host listen on different ports); none when the port is chosen by the system (PORT=0: no
 * stable identity) or KAFKA_GROUP_INSTANCE_ID is `none`.
 */
export function groupInstanceId(env: Env, service: string): string | undefined {
  if (env.KAFKA_GROUP_INSTANCE_ID === 'none') return undefined;
  return env.KAFKA_GROUP_INSTANCE_ID ?? (env.PORT !== 0 ? `${service}@${hostname()}:${env.PORT}` : undefined);
}

/** Embedded unless both the broker and the database server are given. */
export function runningMode(env: Env): 'embedded' | 'distributed' {
  return env.KAFKA_BROKERS && env.DATABASE_URL ? 'distributed' : 'embedded';
}

export const envVarNames = Object.keys(envSchema.shape) as (keyof Env)[];

export { kafkaConnection, type KafkaConnection, type KafkaSasl } from './kafkaConnection.js';
