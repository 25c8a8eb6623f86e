import { loadEnv } from '@shopstream/config';
import { openRuntime, type Runtime } from '@shopstream/runtime';
import { DataDirLockedError } from '@shopstream/db';

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
    if (e instanceof DataDirLockedError) {
      throw new Error(
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
