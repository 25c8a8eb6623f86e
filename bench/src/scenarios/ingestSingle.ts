import type { Bench } from '../context.js';
import { spawnChild } from '../children.js';
import { chooseKafkaClients } from '../kafkaClients.js';
import type { Row, ScenarioResult } from '../report.js';
import { scrapeHistograms, SERVICE_HISTOGRAMS } from '../promMetrics.js';

export const OFFERED_RATES = [500, 1_000, 2_000];

/**
 * Single-event requests, once per Kafka adapter (KAFKA_CLIENT): the throughput at saturation (closed loop,
 * many clients), then the latency at fixed offered rates (open loop: sent on schedule, latency from the
 * scheduled time). Baseline in the same run: a bare express 5 app in its own process (bareExpress.ts:
 * parses the JSON, answers 202) under the same saturating load, measured first.
 */
export async function ingestSingle(b: Bench): Promise<ScenarioResult> {
  const concurrency = b.opts.concurrency ?? 64;
  const contacts = await b.seedContacts();
  const closedLoad = (baseUrl: string, seed: string) => ({
    mode: 'closed' as const,
    baseUrl,
    seed: `${seed}-${Date.now()}`,
    durationMs: b.opts.durationMs,
    warmupMs: b.opts.warmupMs,
    shops: b.shops,
    concurrency,
    bulkSize: 1,
  });

  const bareApp = spawnChild('bare-express', 'bareExpress.ts');
  let bare;
  try {
    const { port } = await bareApp.next<{ port: number }>('ready', 60_000);
    bare = await b.load(closedLoad(`http://127.0.0.1:${port}`, 'bare-single'), { server: bareApp });
  } finally {
    await bareApp.stop();
  }
  const bareRps = bare.result.requestsPerSecond;
  const rows: Row[] = [{ measure: `baseline: bare express 5 (${concurrency} clients)`, value: bareRps, unit: 'req/s' }];
  const { run, skipped } = chooseKafkaClients(b.opts.kafkaClients);
  const details: Record<string, unknown> = { contactsBefore: contacts, concurrency, bareExpress: bare, skipped };

  for (const { client, env } of run) {
    const { child, baseUrl } = await b.server(['ingest-api'], env);
    const phases: Record<string, unknown> = {};
    const sat = await b.load(closedLoad(baseUrl, `single-${client}`), { server: child });
    phases.saturation = sat;
    const rps = sat.result.requestsPerSecond;
    const ratio = rps / Math.max(1, bareRps);
    rows.push(
      {
        measure: `${client}: single ingest at saturation`,
        value: rps,
        unit: 'req/s',
        baseline: { name: 'bare express', value: bareRps },
        ratio,
      },
      { measure: `${client}: ratio to bare express`, value: Number(ratio.toFixed(2)), unit: 'x', budget: { text: '>= 0.5', met: ratio >= 0.5 } },
      {
        measure: `${client}: CPU per request at saturation`,
        value: Number(((1000 * (sat.cpu.processes.server ?? 0)) / Math.max(1, rps)).toFixed(3)),
        unit: 'ms',
        baseline: { name: 'bare express', value: Number(((1000 * (bare.cpu.processes.server ?? 0)) / Math.max(1, bareRps)).toFixed(3)) },
      },
    );
    for (const rate of OFFERED_RATES) {
      const r = await b.load(
        {
          mode: 'open',
          baseUrl,
          seed: `open-${client}-${rate}-${Date.now()}`,
          durationMs: b.opts.durationMs,
          warmupMs: Math.min(b.opts.warmupMs, 2_000),
          shops: b.shops,
          rate,
          maxConnections: 512,
        },
        { server: child },
      );
      phases[`open${rate}`] = r;
      const l = r.result.latencyMs;
      rows.push(
        { measure: `${client}: @${rate}/s p50`, value: l.p50, unit: 'ms' },
        { measure: `${client}: @${rate}/s p99`, value: l.p99, unit: 'ms', ...(rate === 1_000 ? { budget: { text: '< 50 ms', met: l.p99 < 50 } } : {}) },
        { measure: `${client}: @${rate}/s p999`, value: l.p999, unit: 'ms' },
        { measure: `${client}: @${rate}/s answered in the window`, value: r.result.servedPerSecond ?? 0, unit: 'req/s' },
        {
          measure: `${client}: @${rate}/s ingest-api CPU per request`,
          value: Number(((1000 * (r.cpu.processes.server ?? 0)) / Math.max(1, r.result.servedPerSecond ?? 0)).toFixed(3)),
          unit: 'ms',
        },
      );
    }
    const serverMetrics = await scrapeHistograms(baseUrl, SERVICE_HISTOGRAMS);
    await b.stopChild(child);
    details[client] = { phases, serverMetrics };
  }
  return {
    scenario: 'ingest-single',
    rows,
    details,
    notes: [
      `Saturation: ${concurrency} closed-loop clients, the bare express app first, then ingest-api per adapter. Fixed rates: open loop, up to 512 connections, latency from each request's scheduled send time, so a server that falls behind shows its queue.`,
      'Every request carries one realistic event (half with a contact, a third keyed by remote_id); 8 shops.',
      ...skipped.map((s) => `Skipped ${s.client}: ${s.reason}.`),
    ],
  };
}
