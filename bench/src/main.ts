/**
 * `pnpm bench [scenario...] [--duration <s>] [--warmup <s>] [--conversations <n>] [--events <n>]
 * [--concurrency <n>] [--profile] [--log-level <level>] [--keep]`: runs the scenarios against real
 * Kafka and Postgres, prints a table per scenario and writes bench/results/<scenario>.json.
 */
import os from 'node:os';

// kafkajs 2 warns once per producer about its default partitioner; the bench keys by shop like the services.
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';
// One key posts far more than the per-key ingest limit: off in every process the benchmark starts.
process.env.INGEST_RATE_LIMIT_PER_SECOND ??= '0';
process.env.INGEST_RATE_LIMIT_PER_MINUTE ??= '0';
import { parseArgs } from 'node:util';
import { Bench, type Options } from './context.js';
import { cpuMeter } from '@shopstream/testkit/cpu';
import { exitWith, failureText } from '@shopstream/testkit/measurementRun';
import { databaseExists, machine, openInfra } from './infra.js';
import { tableOf, writeResult, type ScenarioResult } from './report.js';
import { ingestBulk } from './scenarios/ingestBulk.js';
import { ingestSingle } from './scenarios/ingestSingle.js';
import { projector } from './scenarios/projector.js';
import { e2e } from './scenarios/e2e.js';
import { exportScenario } from './scenarios/export.js';
import { embedded } from './scenarios/embedded.js';
import { largeBodies } from './scenarios/largeBodies.js';
import { allInOne } from './scenarios/allInOne.js';
import { DEFAULT_KAFKA_CLIENTS } from './kafkaClients.js';

type Scenario = (b: Bench) => Promise<ScenarioResult>;

const scenarios: Record<string, { run: Scenario }> = {
  'ingest-bulk': { run: ingestBulk },
  'ingest-single': { run: ingestSingle },
  projector: { run: projector },
  e2e: { run: e2e },
  export: { run: exportScenario },
  embedded: { run: embedded },
  'large-bodies': { run: largeBodies },
  'all-in-one': { run: allInOne },
};

const USAGE = `usage: pnpm bench [${Object.keys(scenarios).join('|')}]... [options]
  (no scenario: all of them, in that order)
  --duration <s>        seconds per measurement (default 15)
  --warmup <s>          seconds of load before each measurement (default 3)
  --concurrency <n>     closed-loop clients (default 8 for bulk, 64 for single)
  --events <n>          projector: events pre-filled on the topic (default 200000)
  --conversations <n>   export: conversations in the read model (default 1000000)
  --keep                keep the export's seeded database; a later --keep run of the same size reuses it
  --profile             V8 CPU profiles of the server processes into bench/results/profiles/<scenario>
  --log-level <level>   the services' LOG_LEVEL (default info, as in production)
  --kafka-clients <a,b> ingest scenarios: the Kafka adapters (KAFKA_CLIENT) to run, each against its own bare
                        producer (default BENCH_KAFKA_CLIENTS, else kafkajs,platformatic; those unknown here are skipped)
  (embedded: BENCH_EMBEDDED_ENGINES=postgres,pglite chooses the engines measured)
Kafka and Postgres: KAFKA_BROKERS and DATABASE_URL when set (e.g. from \`pnpm infra up\`), else started like the tests' own.`;

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv.filter((a) => a !== '--'),
    allowPositionals: true,
    options: {
      duration: { type: 'string' },
      warmup: { type: 'string' },
      concurrency: { type: 'string' },
      events: { type: 'string' },
      conversations: { type: 'string' },
      keep: { type: 'boolean' },
      profile: { type: 'boolean' },
      'log-level': { type: 'string' },
      'kafka-clients': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const unknown = positionals.filter((p) => !scenarios[p]);
  if (unknown.length > 0) {
    console.error(`unknown scenario ${unknown.join(', ')}\n${USAGE}`);
    return 2;
  }
  const num = (v: string | undefined, def: number) => {
    if (v === undefined) return def;
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`not a positive number: ${v}`);
    return n;
  };
  const opts: Options = {
    durationMs: num(values.duration, 15) * 1000,
    warmupMs: values.warmup === '0' ? 0 : num(values.warmup, 3) * 1000,
    concurrency: values.concurrency ? num(values.concurrency, 0) : undefined,
    events: num(values.events, 200_000),
    conversations: num(values.conversations, 1_000_000),
    keep: values.keep ?? false,
    profile: values.profile ?? false,
    logLevel: values['log-level'] ?? 'info',
    kafkaClients: (values['kafka-clients'] ?? process.env.BENCH_KAFKA_CLIENTS ?? DEFAULT_KAFKA_CLIENTS.join(','))
      .split(',')
      .map((c) => c.trim())
      .filter(Boolean),
  };
  const chosen = positionals.length > 0 ? positionals : Object.keys(scenarios);
  const infra = await openInfra();
  const m = machine(infra);
  console.log(
    `machine: ${m.cores} cores (${m.cpuModel}), ${m.memoryGiB} GiB, Node ${m.node}, Kafka ${m.kafka}, PostgreSQL ${m.postgres}; load average ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')}`,
  );
  let failed = 0;
  try {
    for (const name of chosen) {
      const startedAt = new Date();
      // What everyone else was using just before: the benchmark had nothing running during these 3 s.
      const quiet = cpuMeter({});
      await new Promise((r) => setTimeout(r, 3_000));
      const before = quiet.stop();
      const load = { loadAvg: os.loadavg().map((x) => Number(x.toFixed(2))), coresBusyBefore: Number((before.machineBusy * os.cpus().length).toFixed(2)) };
      console.log(`\n== ${name} ==`);
      // The export's seeded read model takes minutes to make: with --keep, a later run reuses it.
      const dbName = name === 'export' ? `bench_export_${opts.conversations}` : `bench_${name.replaceAll('-', '_')}`;
      const reuse = name === 'export' && opts.keep && (await databaseExists(infra.adminUrl, dbName));
      const b = await Bench.open(name, infra, opts, dbName, !reuse);
      try {
        const r = await scenarios[name].run(b);
        console.log(tableOf(r));
        for (const n of r.notes) console.log(`  ${n}`);
        console.log(`  -> ${writeResult(r, { machine: m, options: opts, startedAt, load })}`);
      } catch (e) {
        failed++;
        console.error(`${name} failed: ${failureText(e)}`);
      } finally {
        await b.close();
      }
    }
  } finally {
    await infra.stop();
  }
  return failed > 0 ? 1 : 0;
}

exitWith(main);
