import { parseEnvFromArgs } from './args.js';
import { runServices, type Runtime } from '@shopstream/runtime';
import { migrationSources, services, serviceNames } from './services.js';
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
if (service && !serviceNames.includes(service)) {
  console.error(`Unknown service "${service}". One of: ${serviceNames.join(', ')}`);
  process.exit(2);
}
const name = service ?? 'all-in-one';

await runServices(services, {
  only: service,
  name,
  migrations: migrationSources,
  // Every service in this process, on a PostgreSQL server (embedded, or DATABASE_URL's): the consumers get a
  // worker thread, one more client of the same server and broker, when the log is Kafka (`auto`) or always (`on`).
  // Not on PGlite (one connection, this thread's). On the Postgres-log bus `auto` keeps them on the event loop: there
  // every publish and every consumer's poll is work for the same PostgreSQL, and the thread's consumers took it from
  // the producers' requests (bench/README.md, "The embedded mode's consumers back on the event loop").
  consumersInThread: (rt, consumers, onDied) => {
    const placement = rt.env.CONSUMER_THREAD;
    const inThread = !service && !rt.db.oneConnection && (placement === 'on' || (placement === 'auto' && Boolean(rt.env.KAFKA_BROKERS)));
    const url = inThread ? (rt.env.DATABASE_URL ?? embeddedServerUrl(rt.env.DATA_DIR)) : undefined;
    return url
      ? startConsumerThread(
          rt.env,
          url,
          consumers.map((c) => c.name),
          rt.logger,
          onDied,
        )
      : undefined;
  },
  banner: (rt, base) => banner(rt, base),
});

async function banner(rt: Runtime, base: string): Promise<string> {
  const env = rt.env;
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
            : `embedded mode, data in ${env.DATA_DIR}, ${rt.db.description}`
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
  return lines.join('\n') + '\n';
}
