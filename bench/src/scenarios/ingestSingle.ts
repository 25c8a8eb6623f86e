import type { Bench } from '../context.js';
import type { LoadResult } from '../loadProcess.js';
import type { Row, ScenarioResult } from '../report.js';
import { scrapeHistograms, SERVICE_HISTOGRAMS } from '../promMetrics.js';

export const OFFERED_RATES = [500, 1_000, 2_000];

/**
 * Single-event requests: the throughput at saturation (closed loop, many clients), then the latency at
 * fixed offered rates (open loop: sent on schedule, latency from the scheduled time).
 */
export async function ingestSingle(b: Bench): Promise<ScenarioResult> {
  const concurrency = b.opts.concurrency ?? 64;
  const contacts = await b.seedContacts();
  const { child, baseUrl } = await b.server(['ingest-api']);
  const phases: Record<string, unknown> = {};
  const sat = await b.load(
    { mode: 'closed', baseUrl, seed: `single-${Date.now()}`, durationMs: b.opts.durationMs, warmupMs: b.opts.warmupMs, shops: b.shops, concurrency, bulkSize: 1 },
    { server: child },
  );
  phases.saturation = sat;
  const rows: Row[] = [
    { measure: 'single ingest at saturation', value: sat.result.requestsPerSecond, unit: 'req/s', budget: { text: '>= 3,000 req/s', met: sat.result.requestsPerSecond >= 3_000 } },
  ];
  const fixed: Record<number, LoadResult> = {};
  for (const rate of OFFERED_RATES) {
    const r = await b.load(
      { mode: 'open', baseUrl, seed: `open-${rate}-${Date.now()}`, durationMs: b.opts.durationMs, warmupMs: Math.min(b.opts.warmupMs, 2_000), shops: b.shops, rate, maxConnections: 512 },
      { server: child },
    );
    phases[`open${rate}`] = r;
    fixed[rate] = r.result;
    const l = r.result.latencyMs;
    rows.push(
      { measure: `@${rate}/s p50`, value: l.p50, unit: 'ms' },
      { measure: `@${rate}/s p99`, value: l.p99, unit: 'ms', ...(rate === 1_000 ? { budget: { text: '< 50 ms', met: l.p99 < 50 } } : {}) },
      { measure: `@${rate}/s p999`, value: l.p999, unit: 'ms' },
      { measure: `@${rate}/s answered in the window`, value: r.result.servedPerSecond ?? 0, unit: 'req/s' },
      {
        measure: `@${rate}/s ingest-api CPU per request`,
        value: Number(((1000 * (r.cpu.processes.server ?? 0)) / Math.max(1, r.result.servedPerSecond ?? 0)).toFixed(3)),
        unit: 'ms',
      },
    );
  }
  const serverMetrics = await scrapeHistograms(baseUrl, SERVICE_HISTOGRAMS);
  await b.stopChild(child);
  return {
    scenario: 'ingest-single',
    rows,
    details: { contactsBefore: contacts, concurrency, phases, serverMetrics },
    notes: [
      `Saturation: ${concurrency} closed-loop clients. Fixed rates: open loop, up to 512 connections, latency from each request's scheduled send time, so a server that falls behind shows its queue.`,
      'Every request carries one realistic event (half with a contact, a third keyed by remote_id); 8 shops.',
    ],
  };
}
