import { loadEnv } from '@shopstream/config';
import { openRuntime, type Runtime } from '@shopstream/runtime';

/**
 * Opens the same ports a service would, from the same environment. In embedded mode PGlite admits one
 * process: when a running `pnpm start` holds DATA_DIR, say so and what to do instead.
 */
export async function withRuntime<T>(fn: (rt: Runtime) => Promise<T>): Promise<T> {
  const env = loadEnv({ LOG_LEVEL: 'warn', ...process.env });
  let rt: Runtime;
  try {
    rt = await openRuntime(env, 'cli');
  } catch (e) {
    if (!env.DATABASE_URL) {
      throw new Error(
        `Could not open the embedded database in ${env.DATA_DIR}: ${(e as Error).message}\n` +
          'If `pnpm start` is running, it holds that database (PGlite admits one process). Stop it first, ' +
          'or use the HTTP API of the running server, or point DATABASE_URL (and KAFKA_BROKERS) at a server.',
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
