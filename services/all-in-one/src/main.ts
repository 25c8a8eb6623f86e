import { loadEnv, parseEnvFromArgs } from './args.js';
import { exitOnSignals, openRuntime, serve, type StartedService } from '@shopstream/runtime';
import { consumerServices, serviceFactories, serviceNames } from './services.js';
import { ensureDemoKey } from './demo.js';
import { startConsumerThread } from './consumerThread.js';
import { embeddedServerUrl } from '@shopstream/db';

/**
 * `pnpm start [service]`: every service in this process (the default), or one of them. Embedded (a
 * PostgreSQL of its own in DATA_DIR and the Postgres-log bus) unless KAFKA_BROKERS and DATABASE_URL are set.
 */
const { service, help } = parseEnvFromArgs(process.argv.slice(2));
if (help) {
  console.log(`Usage: pnpm start [${serviceNames.join('|')}]\n\nWith no service, runs all of them in one process on PORT (default 8080).`);
  process.exit(0);
}
if (service && !serviceFactories[service]) {
  console.error(`Unknown service "${service}". One of: ${serviceNames.join(', ')}`);
  process.exit(2);
}
const signals = exitOnSignals();
const env = loadEnv();
const name = service ?? 'all-in-one';
const rt = await openRuntime(env, name);
const started: StartedService[] = [];
const chosen = Object.entries(serviceFactories).filter(([n]) => !service || n === service);
const failed = async (e: unknown) => {
  rt.logger.fatal({ err: e }, 'a service failed to start');
  for (const s of started.reverse()) await s.stop().catch(() => {});
  await rt.close();
  process.exit(1);
};
try {
  for (const [n, factory] of chosen) if (!consumerServices.has(n)) started.push(await factory(rt));
} catch (e) {
  await failed(e);
}
// Listen first, then join the consumer groups: after a kill -9, a group waits out the dead member's session
// before it lets the new one in, and ingest need not wait for that. /readyz says "consumers": false meanwhile.
let consumersStarted = false;
const { server, stop } = await serve(rt, started, {
  port: env.PORT,
  host: env.HOST,
  name,
  readiness: { consumers: async () => consumersStarted },
});
let stopping = false;
signals.started(() => {
  stopping = true;
  return stop();
});
// A consumer whose start fails (its database or broker busy or away for a moment) is tried again, a few times,
// before the process gives up: the HTTP APIs already serve, and exiting would take them down too.
const startWithRetries = async (n: string, factory: (typeof chosen)[number][1]) => {
  for (let attempt = 1; ; attempt++) {
    try {
      return await factory(rt);
    } catch (e) {
      if (stopping || attempt >= 5) throw e;
      rt.logger.error({ err: e, service: n, attempt }, 'a consumer failed to start; trying again');
      await new Promise((r) => setTimeout(r, 1_000 * 2 ** (attempt - 1)));
    }
  }
};
const consumerNames = chosen.map(([n]) => n).filter((n) => consumerServices.has(n));
// Every service on the embedded PostgreSQL: the consumers get a worker thread, a client of the same server.
const threadUrl =
  !service && rt.mode === 'embedded' && rt.db.kind === 'postgres' && env.CONSUMER_THREAD === 'auto' ? embeddedServerUrl(env.DATA_DIR) : undefined;
if (threadUrl && consumerNames.length > 0) {
  const thread = startConsumerThread(env, threadUrl, consumerNames, rt.logger, (err) => {
    if (!stopping) void failed(err);
  });
  started.push(thread.service);
  thread.started.then(
    () => {
      consumersStarted = true;
      rt.logger.info({ consumers: consumerNames }, 'consumers started in a worker thread');
    },
    () => {},
  );
} else
  void (async () => {
    for (const [n, factory] of chosen) {
      if (!consumerServices.has(n) || stopping) continue;
      const s = await startWithRetries(n, factory);
      // A stop that began while this one joined its group: stop it too (stop() has taken its list already).
      if (stopping) await s.stop().catch(() => {});
      else started.push(s);
    }
    consumersStarted = true;
  })().catch(async (e: unknown) => {
    if (!stopping) await failed(e);
  });

const base = env.PUBLIC_BASE_URL ?? `http://localhost:${server.port}`;
const lines = [
  '',
  // Only one of the two variables set is a mixed mode: say what is where.
  `Shopstream ${name} is up (${
    rt.mode === 'distributed'
      ? 'distributed mode'
      : env.DATABASE_URL
        ? 'the PostgreSQL server of DATABASE_URL, with the Postgres-log bus on it: KAFKA_BROKERS is not set'
        : env.KAFKA_BROKERS
          ? `PGlite in ${env.DATA_DIR}, with Kafka: DATABASE_URL is not set`
          : `embedded mode, data in ${env.DATA_DIR}, ${rt.db.kind === 'postgres' ? 'PostgreSQL' : 'PGlite'}`
  }).`,
  `  API:      ${base}/v2026-04/`,
  `  Docs:     ${base}/docs`,
];
// The demo key (its secret kept in the database so every start can print it) only in the embedded database.
if (!service && !env.DATABASE_URL && !env.BOOTSTRAP_API_KEYS) {
  const demo = await ensureDemoKey(rt);
  lines.push(
    `  Shop id:  ${demo.shopId}`,
    `  API key:  ${demo.key}${demo.created ? '   (created now, for this data directory)' : ''}`,
    '',
    'Try:',
    `  curl -sS -X POST ${base}/v2026-04/events/ \\`,
    `    -H 'Authorization: Bearer ${demo.key}' -H 'X-Shop-Id: ${demo.shopId}' -H 'Content-Type: application/json' \\`,
    `    -d '{"name":"Placed order","metric":{"metric_name":"placed_order","value":42},"contact":{"email":"ada@example.com"}}'`,
  );
}
console.log(lines.join('\n') + '\n');
