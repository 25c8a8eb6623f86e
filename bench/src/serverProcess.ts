/**
 * A Shopstream process for the benchmark: the named services (comma-separated argument) on the real
 * Kafka and Postgres given by the environment, served on a free port exactly as `pnpm start <service>`
 * would. Tells the parent `{type: 'ready', port}`; stops cleanly on `{type: 'stop'}` (so a --cpu-prof
 * profile gets written).
 */
import { loadEnv } from '@shopstream/config';
import { openRuntime, serve, type StartedService } from '@shopstream/runtime';
import { startTracing, stopTracing } from '@shopstream/telemetry';
import { serviceFactories } from '@shopstream/all-in-one';
import { failChild } from './children.js';

async function main(): Promise<void> {
  const names = (process.argv[2] ?? '').split(',').filter(Boolean);
  for (const n of names) if (!serviceFactories[n]) throw new Error(`unknown service ${n}`);
  const env = loadEnv({ ...process.env, PORT: '0', HOST: '127.0.0.1' });
  // As runServices does: spans only when OTEL_TRACES_EXPORTER=otlp is in the environment (bench/README.md).
  await startTracing(names.join('+'));
  const rt = await openRuntime(env, names.join('+'));
  const started: StartedService[] = [];
  for (const n of names) started.push(await serviceFactories[n](rt));
  const { server, stop } = await serve(rt, started, { port: 0, host: '127.0.0.1', name: names.join('+') });
  let stopping = false;
  const onStop = () => {
    if (stopping) return;
    stopping = true;
    stop()
      .then(() => stopTracing())
      .then(
        () => process.exit(0),
        (e) => failChild(e),
      );
  };
  process.on('message', (m: any) => {
    if (m?.type === 'stop') onStop();
  });
  process.on('SIGTERM', onStop);
  process.on('disconnect', onStop);
  process.send!({ type: 'ready', port: server.port });
}

main().catch(failChild);
