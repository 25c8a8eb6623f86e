import { loadEnv } from '@shopstream/config';
// runtime.ts alone (`/open`): the package's index serves HTTP too, and express is a third of a command's start.
import { openRuntime, type Runtime, type RuntimeOptions } from '@shopstream/runtime/open';
import { migrationSources } from '@shopstream/all-in-one';
import { DataDirLockedError, migrate, openDb, type Db } from '@shopstream/db';
import { cliIo } from './io.js';
import { assertKafkaReachable } from './reach.js';

/**
 * How long a command waits for a broker to accept a connection before it says it cannot reach it. The
 * database has its own bound (connectPostgres: 2 s per connection attempt, then the pool's 2 s retries).
 */
const CONNECT_TIMEOUT_MS = 10_000;

/** The embedded database's directory is held by a running server whose database admits no other process (PGlite). */
export class EmbeddedServerRunningError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EmbeddedServerRunningError';
  }
}

/**
 * Opens the same ports a service would, from the same environment. In embedded mode a command attaches to
 * the PostgreSQL of a running `pnpm start`; only a PGlite DATA_DIR admits one process: then say what to do instead.
 */
export async function withRuntime<T>(fn: (rt: Runtime) => Promise<T>, options: RuntimeOptions = {}): Promise<T> {
  const env = loadEnv({ LOG_LEVEL: 'warn', ...cliIo().env });
  if (env.KAFKA_BROKERS) await assertKafkaReachable(env.KAFKA_BROKERS, CONNECT_TIMEOUT_MS);
  let rt: Runtime;
  try {
    rt = await openRuntime(env, 'cli', { logTo: 'stderr', attach: true, migrations: migrationSources, ...options });
  } catch (e) {
    if (e instanceof DataDirLockedError) {
      throw new EmbeddedServerRunningError(
        `${e.message}\nThat is most likely a running \`pnpm start\`. Either stop it (Ctrl-C), run this command, and ` +
          'start it again (it picks up what the command wrote), or use the HTTP API of the running server, ' +
          'or run Shopstream on a server (DATABASE_URL and KAFKA_BROKERS) where any number of processes may connect.',
      );
    }
    throw e;
  }
  try {
    return await fn(rt);
  } finally {
    await rt.close();
  }
}

/**
 * Only the database, migrated: for commands that must work while Kafka is down. `lockedAdvice` finishes the
 * sentence "A running `pnpm start` holds the embedded database: ..." when PGlite's DATA_DIR is taken.
 */
export async function withDb<T>(lockedAdvice: string, fn: (db: Db) => Promise<T>, options: { migrate?: boolean } = {}): Promise<T> {
  const env = loadEnv(cliIo().env);
  let db: Db;
  try {
    db = await openDb(
      env.DATABASE_URL
        ? { databaseUrl: env.DATABASE_URL, poolSize: 1, applicationName: 'shopstream-cli', preparedStatements: env.DATABASE_PREPARED_STATEMENTS }
        : {
            dataDir: env.DATA_DIR,
            engine: env.EMBEDDED_DB,
            attach: true,
            poolSize: 1,
            applicationName: 'shopstream-cli',
            preparedStatements: env.DATABASE_PREPARED_STATEMENTS,
          },
    );
  } catch (e) {
    if (e instanceof DataDirLockedError) {
      throw new Error(`${e.message}\nA running \`pnpm start\` holds the embedded database: ${lockedAdvice}`, { cause: e });
    }
    throw e;
  }
  try {
    if (options.migrate ?? true) await migrate(db, undefined, migrationSources);
    return await fn(db);
  } finally {
    await db.close();
  }
}
