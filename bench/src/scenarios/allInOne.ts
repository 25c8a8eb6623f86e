import { envSchema } from '@shopstream/config';
import { spawnChild } from '../children.js';
import type { Bench } from '../context.js';
import type { Row, ScenarioResult } from '../report.js';
import { consumersCaughtUp } from '../promMetrics.js';

/** The all-in-one's consumer placements measured, in order (BENCH_CONSUMER_THREADS, e.g. `auto` alone). */
const PLACEMENTS = (process.env.BENCH_CONSUMER_THREADS ?? 'off,auto').split(',') as ('auto' | 'off')[];
/**
 * Each phase after the first starts once the consumers have worked off what the phase before left them
 * (consumersCaughtUp): the fixed rate measures the process at 1,000 req/s, not at 1,000 req/s while its consumers
 * catch up on the saturation's backlog. BENCH_NO_CATCH_UP=1 starts each phase at once, as the bench did before.
 */
const CATCH_UP = process.env.BENCH_NO_CATCH_UP !== '1';
/**
 * The fixed rate's requests a second (the budget line's 1,000): BENCH_ALL_IN_ONE_RATE sets another, to compare the
 * process's CPU at a rate both sides keep up with (its rows then name that rate; the phase's key stays `open1000`).
 */
const FIXED_RATE = Number(process.env.BENCH_ALL_IN_ONE_RATE ?? 1_000);

/**
 * `pnpm start` as users run it in distributed mode: the all-in-one process (services/all-in-one/src/main.ts
 * through tsx, every service, its consumers projecting what the load sends) on the bench's Kafka and
 * PostgreSQL, once per consumer placement (CONSUMER_THREAD: `off`, the consumers on the event loop that
 * answers HTTP; `auto`, the default, in a worker thread). Each: single events at saturation, at a fixed
 * 1,000/s, then 100-event bulks. Baselines in the same run: a bare express 5 app under the same saturating
 * load, and a bare producer of the adapter in use (KAFKA_CLIENT as the process reads it).
 */
export async function allInOne(b: Bench): Promise<ScenarioResult> {
  const client = envSchema.shape.KAFKA_CLIENT.parse(process.env.KAFKA_CLIENT || undefined);
  const contacts = await b.seedContacts();
  await b.createTopics();
  const common = { durationMs: b.opts.durationMs, warmupMs: b.opts.warmupMs, shops: b.shops };
  const rows: Row[] = [];
  const phases: Record<string, unknown> = { contactsBefore: contacts, client };

  const bareApp = spawnChild('bare-express', 'bareExpress.ts');
  let bareSingle;
  try {
    const { port } = await bareApp.next<{ port: number }>('ready', 60_000);
    bareSingle = await b.load(
      { mode: 'closed', baseUrl: `http://127.0.0.1:${port}`, seed: `aio-bare-single-${Date.now()}`, concurrency: 64, bulkSize: 1, ...common },
      { server: bareApp },
    );
  } finally {
    await bareApp.stop();
  }
  const bareRps = bareSingle.result.requestsPerSecond;
  const bareBulk = await b.load({
    mode: 'producer',
    client,
    brokers: b.infra.brokers,
    topic: b.bareTopic,
    seed: `aio-bare-producer-${Date.now()}`,
    concurrency: 8,
    bulkSize: 100,
    ...common,
  });
  const bareEps = bareBulk.result.eventsPerSecond;
  // Issue 23 measured the all-in-one's bulk from outside against a bare kafkajs producer (0.49): the same baseline
  // beside the adapter's own, when the adapter in use is another, so the two figures compare like for like.
  const bareKafkajs =
    client === 'kafkajs'
      ? undefined
      : await b.load({
          mode: 'producer',
          client: 'kafkajs',
          brokers: b.infra.brokers,
          topic: b.bareTopic,
          seed: `aio-bare-kafkajs-${Date.now()}`,
          concurrency: 8,
          bulkSize: 100,
          ...common,
        });
  const bareKafkajsEps = bareKafkajs?.result.eventsPerSecond;
  phases.bareExpress = bareSingle;
  phases.bareProducer = bareBulk;
  if (bareKafkajs) phases.bareKafkajsProducer = bareKafkajs;
  rows.push(
    { measure: 'baseline: bare express 5 (64 clients)', value: bareRps, unit: 'req/s' },
    { measure: `baseline: bare ${client} producer (8 x 100)`, value: bareEps, unit: 'events/s' },
    ...(bareKafkajsEps === undefined ? [] : [{ measure: 'baseline: bare kafkajs producer (8 x 100)', value: bareKafkajsEps, unit: 'events/s' }]),
  );

  for (const placement of PLACEMENTS) {
    const { child, baseUrl } = await b.allInOne(`all-in-one-${placement}`, { CONSUMER_THREAD: placement });
    try {
      const sat = await b.load(
        { mode: 'closed', baseUrl, seed: `aio-single-${placement}-${Date.now()}`, concurrency: 64, bulkSize: 1, ...common },
        { server: child },
      );
      const afterSaturation = CATCH_UP ? await consumersCaughtUp(baseUrl) : undefined;
      const fixed = await b.load(
        {
          mode: 'open',
          baseUrl,
          seed: `aio-open-${placement}-${Date.now()}`,
          ...common,
          warmupMs: Math.min(b.opts.warmupMs, 2_000),
          rate: FIXED_RATE,
          maxConnections: 512,
        },
        { server: child },
      );
      const afterFixed = CATCH_UP ? await consumersCaughtUp(baseUrl) : undefined;
      const bulk = await b.load(
        { mode: 'closed', baseUrl, seed: `aio-bulk-${placement}-${Date.now()}`, concurrency: 8, bulkSize: 100, ...common },
        { server: child },
      );
      phases[placement] = { saturation: sat, afterSaturation, open1000: fixed, afterFixed, bulk };
      const label = `CONSUMER_THREAD=${placement}`;
      const rps = sat.result.requestsPerSecond;
      const eps = bulk.result.eventsPerSecond;
      const notOk = [sat, fixed, bulk].reduce(
        (n, r) =>
          n +
          Object.entries(r.result.status)
            .filter(([s]) => !s.startsWith('2'))
            .reduce((m, [, v]) => m + v, 0),
        0,
      );
      rows.push(
        {
          measure: `${label}: single at saturation`,
          value: rps,
          unit: 'req/s',
          baseline: { name: 'bare express', value: bareRps },
          ratio: rps / Math.max(1, bareRps),
          budget: { text: '>= 0.5 x bare express', met: rps >= 0.5 * bareRps },
        },
        {
          measure: `${label}: CPU per request at saturation`,
          value: Number(((1000 * (sat.cpu.processes.server ?? 0)) / Math.max(1, rps)).toFixed(3)),
          unit: 'ms',
        },
        ...(afterSaturation
          ? [
              {
                measure: `${label}: consumers caught up after saturation`,
                value: afterSaturation.caughtUp ? afterSaturation.seconds : Number.NaN,
                unit: 's',
              },
            ]
          : []),
        { measure: `${label}: @${FIXED_RATE}/s p50`, value: fixed.result.latencyMs.p50, unit: 'ms' },
        {
          measure: `${label}: @${FIXED_RATE}/s p99`,
          value: fixed.result.latencyMs.p99,
          unit: 'ms',
          budget: { text: '< 50 ms', met: fixed.result.latencyMs.p99 < 50 },
        },
        { measure: `${label}: @${FIXED_RATE}/s answered in the window`, value: fixed.result.servedPerSecond ?? 0, unit: 'req/s' },
        {
          measure: `${label}: bulk (8 clients x 100 events)`,
          value: eps,
          unit: 'events/s',
          baseline: { name: `bare ${client} producer`, value: bareEps },
          ratio: eps / Math.max(1, bareEps),
          budget: { text: '>= 0.5 x bare producer', met: eps >= 0.5 * bareEps },
        },
        ...(bareKafkajsEps === undefined
          ? []
          : [
              {
                measure: `${label}: bulk, ratio to the bare kafkajs producer (the issue's baseline)`,
                value: eps,
                unit: 'events/s',
                baseline: { name: 'bare kafkajs producer', value: bareKafkajsEps },
                ratio: eps / Math.max(1, bareKafkajsEps),
              },
            ]),
        {
          measure: `${label}: CPU per 1,000 events (bulk)`,
          value: Number(((1e6 * (bulk.cpu.processes.server ?? 0)) / Math.max(1, eps)).toFixed(1)),
          unit: 'ms',
        },
        { measure: `${label}: non-2xx answers`, value: notOk, unit: 'answers' },
      );
    } finally {
      await b.stopChild(child);
    }
  }
  for (const r of rows) if (typeof r.value !== 'number' || !Number.isFinite(r.value)) r.value = Number.NaN;
  return {
    scenario: 'all-in-one',
    rows,
    details: { phases },
    notes: [
      `\`pnpm start\` in distributed mode: every service in one Node process (the runner, through tsx, as \`pnpm start\` runs it) on the bench's Kafka and PostgreSQL, KAFKA_CLIENT=${client}; its consumers project what the load sends. Once per CONSUMER_THREAD (${PLACEMENTS.join(', ')}).`,
      "Saturation: 64 closed-loop clients of single events; fixed rate: open loop at 1,000 req/s, latency from the scheduled send time; bulk: 8 closed-loop clients x 100 events. The same realistic events as the other scenarios (19,000 of each shop's 20,000 returning contacts stored first).",
      CATCH_UP
        ? "The fixed rate and the bulk phase each start once the process's consumers have worked off the phase before (its shopstream_consumer_lag 0 over a lag reading; the time from the load's end is a row, up to one 5 s reading late)."
        : 'BENCH_NO_CATCH_UP=1: each phase started right after the one before, while the consumers still worked off its records.',
      'Baselines, measured first in the same run: a bare express 5 app (the single load) and a bare producer of the same client (8 senders x 100 records); on another client than kafkajs, a bare kafkajs producer too, the baseline issue 23 measured the bulk ratio against from outside.',
    ],
  };
}
