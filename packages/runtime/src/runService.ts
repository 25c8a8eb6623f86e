import { loadEnv } from '@shopstream/config';
import { openRuntime } from './runtime.js';
import { exitOnSignals, serve, type ServiceFactory } from './service.js';

/**
 * The whole `main.ts` of a one-service process: signals first (a SIGTERM during start-up is held, not lost),
 * then the environment, the runtime, the service, and its HTTP port (PORT, HOST); a signal then drains and stops.
 */
export async function runService(name: string, start: ServiceFactory): Promise<void> {
  const signals = exitOnSignals();
  const env = loadEnv();
  const rt = await openRuntime(env, name);
  const { stop } = await serve(rt, [await start(rt)], { port: env.PORT, host: env.HOST, name });
  signals.started(stop);
}
