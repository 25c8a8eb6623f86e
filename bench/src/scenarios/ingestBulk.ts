import type { Bench } from '../context.js';
import { chooseKafkaClients } from '../kafkaClients.js';
import type { Row, ScenarioResult } from '../report.js';
import { scrapeHistograms, SERVICE_HISTOGRAMS } from '../promMetrics.js';

/**
 * Closed-loop clients posting 100-event bulk requests to ingest-api, once per Kafka adapter (KAFKA_CLIENT),
 * each against a bare producer of the same client (idempotent, acks -1) sending the same kind of records in
 * sends of 100, with as many concurrent senders, measured right after it.
 */
export async function ingestBulk(b: Bench): Promise<ScenarioResult> {
  const concurrency = b.opts.concurrency ?? 8;
  const common = { durationMs: b.opts.durationMs, warmupMs: b.opts.warmupMs, shops: b.shops, concurrency, bulkSize: 100 };
  const contacts = await b.seedContacts();
  // The bare producer's topic (Bench.bareTopic) with the services' own.
  await b.createTopics();
  const { run, skipped } = chooseKafkaClients(b.opts.kafkaClients);
  const rows: Row[] = [];
  const details: Record<string, unknown> = { contactsBefore: contacts, concurrency, bulkSize: 100, skipped };
  for (const { client, env } of run) {
    const { child, baseUrl } = await b.server(['ingest-api'], env);
    const api = await b.load({ mode: 'closed', baseUrl, seed: `bulk-${client}-${Date.now()}`, ...common }, { server: child });
    const serverMetrics = await scrapeHistograms(baseUrl, SERVICE_HISTOGRAMS);
    await b.stopChild(child);
    let bare;
    try {
      bare = await b.load({ mode: 'producer', client, brokers: b.infra.brokers, topic: b.bareTopic, seed: `bare-${client}-${Date.now()}`, ...common });
    } catch (e) {
      skipped.push({ client, reason: `bare ${client} producer failed: ${String(e).slice(0, 200)}` });
    }
    const eps = api.result.eventsPerSecond;
    const ratio = bare ? eps / Math.max(1, bare.result.eventsPerSecond) : undefined;
    const baseline = bare ? { name: `bare ${client} producer`, value: bare.result.eventsPerSecond } : undefined;
    rows.push(
      {
        measure: `${client}: bulk ingest throughput`,
        value: eps,
        unit: 'events/s',
        baseline,
        ratio,
      },
      ...(ratio !== undefined
        ? [{ measure: `${client}: ratio to bare producer`, value: Number(ratio.toFixed(2)), unit: 'x', budget: { text: '>= 0.5', met: ratio >= 0.5 } }]
        : []),
      {
        measure: `${client}: CPU per 1,000 events`,
        value: Number(((1e6 * (api.cpu.processes.server ?? 0)) / Math.max(1, eps)).toFixed(1)),
        unit: 'ms',
        baseline: bare
          ? { name: 'bare producer process', value: Number(((1e6 * (bare.cpu.processes.load ?? 0)) / Math.max(1, bare.result.eventsPerSecond)).toFixed(1)) }
          : undefined,
      },
      {
        measure: `${client}: bulk request latency p50`,
        value: api.result.latencyMs.p50,
        unit: 'ms',
        baseline: bare ? { name: 'bare send p50', value: bare.result.latencyMs.p50 } : undefined,
      },
      {
        measure: `${client}: bulk request latency p99`,
        value: api.result.latencyMs.p99,
        unit: 'ms',
        baseline: bare ? { name: 'bare send p99', value: bare.result.latencyMs.p99 } : undefined,
      },
    );
    details[client] = { ingestApi: api, bareProducer: bare, serverMetrics };
  }
  return {
    scenario: 'ingest-bulk',
    rows,
    details,
    notes: [
      `${concurrency} closed-loop clients, 100 events per request; about half the events carry a contact from a pool of 20,000 per shop (19,000 of them already stored, analysed), a third are keyed by remote_id; 8 shops.`,
      "ingest-api ran alone in its own process (LOG_LEVEL as given, KAFKA_CLIENT as named); the load came from another process; each adapter's bare producer ran right after it.",
      ...skipped.map((s) => `Skipped ${s.client}: ${s.reason}.`),
    ],
  };
}
