import { randomUUID } from 'node:crypto';
import { queryRows, sql } from '@shopstream/db';
import type { Bench } from '../context.js';
import type { ScenarioResult } from '../report.js';
import { scrapeHistograms, SERVICE_HISTOGRAMS } from '../promMetrics.js';
import { epochMs, sleep, summarize } from '../stats.js';

const RATE = 1_000;

/**
 * ingest-api and activity-projector each in its own process; single events at a fixed 1,000/s (open
 * loop). For every accepted event: the time from its HTTP answer to its Activity row being visible in
 * Postgres (polled), and to its metric event arriving on the `metrics` topic (consumed).
 */
export async function e2e(b: Bench): Promise<ScenarioResult> {
  // Consumers first, so the ingest API's first events find the projector ready.
  const contacts = await b.seedContacts();
  const proj = await b.server(['activity-projector']);
  const api = await b.server(['ingest-api']);

  const answered = new Map<string, { shop: string; t: number }>();
  const pending = new Map<string, { shop: string; t: number }>();
  const rowSeen = new Map<string, number>();
  const metricSeen = new Map<string, number>();
  let stopped = false;
  let giveUpAt = Infinity;

  // Metric events: a consumer of our own on the topic, from the start.
  const consumer = b.kafka('bench-e2e-metrics').consumer({ groupId: `bench-e2e-${randomUUID()}`, maxWaitTimeInMs: 20 });
  await consumer.connect();
  await consumer.subscribe({ topic: b.topics.metrics, fromBeginning: true });
  await consumer.run({
    eachBatch: async ({ batch }) => {
      const t = epochMs();
      for (const m of batch.messages) {
        const id = JSON.parse(m.value!.toString('utf8')).id as string;
        if (!metricSeen.has(id)) metricSeen.set(id, t);
      }
    },
  });

  // Activity rows: poll for the answered ids not seen yet; a row seen by a query was visible when it began.
  let polls = 0;
  let pollMs = 0;
  const poller = (async () => {
    while (!stopped || pending.size > 0) {
      if (pending.size === 0) {
        await sleep(2);
        continue;
      }
      const batch = [...pending.entries()].slice(0, 5_000);
      const began = epochMs();
      const ids = await queryRows(
        b.db,
        sql`
        SELECT a.id FROM activities a
        JOIN unnest(${batch.map(([, v]) => v.shop)}::uuid[], ${batch.map(([id]) => id)}::uuid[]) AS p(shop_id, id)
          ON a.shop_id = p.shop_id AND a.id = p.id`,
        (r) => String(r.id),
      );
      polls++;
      pollMs += epochMs() - began;
      for (const id of ids) {
        rowSeen.set(id, began);
        pending.delete(id);
      }
      if (stopped && performance.now() > giveUpAt) break;
      await sleep(5);
    }
  })();

  const load = await b.load(
    {
      mode: 'open',
      baseUrl: api.baseUrl,
      seed: `e2e-${Date.now()}`,
      durationMs: b.opts.durationMs,
      warmupMs: b.opts.warmupMs,
      shops: b.shops,
      rate: RATE,
      maxConnections: 256,
      collectAnswers: true,
    },
    { ingest: api.child, projector: proj.child },
    (m) => {
      if (m.type !== 'answers') return;
      for (const a of m.items as { id: string; shop: string; t: number }[]) {
        answered.set(a.id, { shop: a.shop, t: a.t });
        if (!rowSeen.has(a.id)) pending.set(a.id, { shop: a.shop, t: a.t });
      }
    },
  );
  stopped = true;
  giveUpAt = performance.now() + 30_000;
  await poller;
  const metricDeadline = performance.now() + 30_000;
  while ([...answered.keys()].some((id) => !metricSeen.has(id)) && performance.now() < metricDeadline) await sleep(50);
  await consumer.disconnect();
  const serverMetrics = {
    ingest: await scrapeHistograms(api.baseUrl, SERVICE_HISTOGRAMS),
    projector: await scrapeHistograms(proj.baseUrl, SERVICE_HISTOGRAMS),
  };
  await b.stopChild(api.child);
  await b.stopChild(proj.child);

  const toRow: number[] = [];
  const toMetric: number[] = [];
  for (const [id, a] of answered) {
    const r = rowSeen.get(id);
    if (r !== undefined) toRow.push(Math.max(0, r - a.t));
    const m = metricSeen.get(id);
    if (m !== undefined) toMetric.push(Math.max(0, m - a.t));
  }
  const row = summarize(toRow);
  const metric = summarize(toMetric);
  const missingRows = answered.size - toRow.length;
  const missingMetrics = answered.size - toMetric.length;
  return {
    scenario: 'e2e',
    rows: [
      { measure: 'HTTP answer p50 @1000/s', value: load.result.latencyMs.p50, unit: 'ms' },
      { measure: 'HTTP answer p99 @1000/s', value: load.result.latencyMs.p99, unit: 'ms' },
      { measure: 'answer -> Activity row p50', value: row.p50, unit: 'ms' },
      { measure: 'answer -> Activity row p99', value: row.p99, unit: 'ms', budget: { text: '< 500 ms', met: row.p99 < 500 && missingRows === 0 } },
      { measure: 'answer -> metric event p50', value: metric.p50, unit: 'ms' },
      { measure: 'answer -> metric event p99', value: metric.p99, unit: 'ms' },
    ],
    details: {
      contactsBefore: contacts,
      rate: RATE,
      accepted: answered.size,
      missingRows,
      missingMetrics,
      toRowMs: row,
      toMetricMs: metric,
      poll: { polls, meanQueryMs: polls ? pollMs / polls : 0 },
      load,
      serverMetrics,
    },
    notes: [
      `${RATE} single events/s, open loop, ${answered.size.toLocaleString('en-US')} accepted in the window; ${missingRows} rows and ${missingMetrics} metric events not seen within 30 s after it.`,
      `Row visibility is polled (a query every ~5 ms, mean query ${polls ? (pollMs / polls).toFixed(1) : '?'} ms): a row counts as visible when the first query that saw it began. Metric events are timed when a kafkajs consumer in the bench process received them.`,
    ],
  };
}
