import type { Bench } from '../context.js';
import type { ScenarioResult } from '../report.js';
import { scrapeHistograms, SERVICE_HISTOGRAMS } from '../promMetrics.js';

/**
 * Closed-loop clients posting 100-event bulk requests to ingest-api, against a bare kafkajs producer
 * (idempotent, acks -1) sending the same kind of records in sends of 100, with as many concurrent senders.
 */
export async function ingestBulk(b: Bench): Promise<ScenarioResult> {
  const concurrency = b.opts.concurrency ?? 8;
  const common = { durationMs: b.opts.durationMs, warmupMs: b.opts.warmupMs, shops: b.shops, concurrency, bulkSize: 100 };

  const contacts = await b.seedContacts();
  const { child, baseUrl } = await b.server(['ingest-api']);
  const api = await b.load({ mode: 'closed', baseUrl, seed: `bulk-${Date.now()}`, ...common }, { server: child });
  const serverMetrics = await scrapeHistograms(baseUrl, SERVICE_HISTOGRAMS);
  await b.stopChild(child);

  const bare = await b.load({ mode: 'producer', brokers: b.infra.brokers, topic: b.topics.events, seed: `bare-${Date.now()}`, ...common });

  const ratio = api.result.eventsPerSecond / bare.result.eventsPerSecond;
  const baseline = { name: 'bare kafkajs', value: bare.result.eventsPerSecond };
  return {
    scenario: 'ingest-bulk',
    rows: [
      { measure: 'bulk ingest throughput', value: api.result.eventsPerSecond, unit: 'events/s', baseline, ratio, budget: { text: '>= 20,000 events/s', met: api.result.eventsPerSecond >= 20_000 } },
      { measure: 'ratio to bare producer', value: Number(ratio.toFixed(2)), unit: 'x', budget: { text: '>= 0.5', met: ratio >= 0.5 } },
      {
        measure: 'CPU per 1,000 events',
        value: Number(((1e6 * (api.cpu.processes.server ?? 0)) / Math.max(1, api.result.eventsPerSecond)).toFixed(1)),
        unit: 'ms',
        baseline: { name: 'bare producer process', value: Number(((1e6 * (bare.cpu.processes.load ?? 0)) / Math.max(1, bare.result.eventsPerSecond)).toFixed(1)) },
      },
      { measure: 'bulk request latency p50', value: api.result.latencyMs.p50, unit: 'ms', baseline: { name: 'bare send p50', value: bare.result.latencyMs.p50 } },
      { measure: 'bulk request latency p99', value: api.result.latencyMs.p99, unit: 'ms', baseline: { name: 'bare send p99', value: bare.result.latencyMs.p99 } },
    ],
    details: { contactsBefore: contacts, concurrency, bulkSize: 100, ingestApi: api, bareProducer: bare, serverMetrics },
    notes: [
      `${concurrency} closed-loop clients, 100 events per request; about half the events carry a contact from a pool of 20,000 per shop (19,000 of them already stored, analysed), a third are keyed by remote_id; 8 shops.`,
      'ingest-api ran alone in its own process (LOG_LEVEL as given); the load came from another process.',
    ],
  };
}
