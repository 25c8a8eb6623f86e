import { randomUUID } from 'node:crypto';
import { CompressionTypes } from 'kafkajs';
import { headers as H, schemas, type EventRecord } from '@shopstream/contracts';
import { sql, type Queryable } from '@shopstream/db';
import type { Bench } from '../context.js';
import { eventMaker, eventRecordOf } from '../events.js';
import type { ScenarioResult } from '../report.js';
import { sleep } from '../stats.js';
import { cpuMeter } from '@shopstream/testkit/cpu';
import { scrapeHistograms, SERVICE_HISTOGRAMS } from '../promMetrics.js';

/** Rows per statement in the baseline: about what one kafkajs fetch hands the projector per partition. */
const BASELINE_BATCH = 1_000;

/**
 * The activity projector draining a pre-filled `events` topic, against a bare multi-row insert of the
 * same rows into the same tables (activities, contact_timeline, outbox), one transaction per
 * batch on one connection, as the projector does.
 */
export async function projector(b: Bench): Promise<ScenarioResult> {
  const total = b.opts.events;
  await b.createTopics();

  // The topic: records exactly as ingest-api writes them, spread over the shops.
  const records: EventRecord[] = [];
  const makers = b.shops.map((s, i) => ({ shop: s.shopId, maker: eventMaker({ seed: `proj-${i}-${Date.now()}` }) }));
  const producer = b.kafka('bench-prefill').producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const fillStart = performance.now();
  for (let sent = 0; sent < total; ) {
    const n = Math.min(2_000, total - sent);
    const messages = [];
    for (let i = 0; i < n; i++) {
      const { shop, maker } = makers[(sent + i) % makers.length];
      const r = eventRecordOf(shop, maker.event(), randomUUID());
      const value = JSON.stringify(r);
      records.push(r);
      messages.push({ key: shop, value, headers: { [H.contentType]: 'application/json', [H.schema]: schemas.eventRecorded, [H.shopId]: shop } });
    }
    await producer.send({ topic: b.topics.events, acks: -1, compression: CompressionTypes.None, messages });
    sent += n;
  }
  await producer.disconnect();
  const fillSeconds = (performance.now() - fillStart) / 1000;
  const withContact = records.filter((r) => r.contact !== null).length;

  // Baseline: the same rows, bare.
  const t0 = performance.now();
  for (let i = 0; i < records.length; i += BASELINE_BATCH) {
    const batch = records.slice(i, i + BASELINE_BATCH);
    await b.db.tx((tx) => bareInsert(tx, batch));
  }
  const baselineSeconds = (performance.now() - t0) / 1000;
  const baselineRate = Math.round(total / baselineSeconds);
  await b.db.query(sql`TRUNCATE activities, contact_timeline, outbox`);

  // The projector, in its own process, from the beginning of the topic.
  const count = async () => Number((await b.db.query(sql`SELECT count(*)::int AS n FROM activities`))[0].n);
  const outboxLeft = async () => Number((await b.db.query(sql`SELECT count(*)::int AS n FROM outbox`))[0].n);
  const spawned = performance.now();
  const serverPromise = b.server(['activity-projector']);
  let first = 0;
  let firstAt = 0;
  for (;;) {
    first = await count();
    if (first > 0) {
      firstAt = performance.now();
      break;
    }
    if (performance.now() - spawned > 120_000) throw new Error('the projector wrote nothing within 120 s');
    await sleep(20);
  }
  const { child, baseUrl } = await serverPromise;
  const meter = cpuMeter({ bench: process.pid, projector: child.pid });
  let done = first;
  let doneAt = firstAt;
  const deadline = performance.now() + 600_000;
  while (done < total) {
    if (performance.now() > deadline) throw new Error(`the projector wrote ${done} of ${total} activities in 600 s`);
    await sleep(100);
    done = await count();
    doneAt = performance.now();
  }
  const cpu = meter.stop();
  while ((await outboxLeft()) > 0 && performance.now() < deadline) await sleep(50);
  const metricsDoneAt = performance.now();
  const serverMetrics = await scrapeHistograms(baseUrl, SERVICE_HISTOGRAMS);
  await b.stopChild(child);

  const seconds = (doneAt - firstAt) / 1000;
  const rate = Math.round((total - first) / seconds);
  const ratio = rate / baselineRate;
  return {
    scenario: 'projector',
    rows: [
      { measure: 'activity projector', value: rate, unit: 'events/s', baseline: { name: 'bare multi-row insert', value: baselineRate }, ratio, budget: { text: '>= 20,000 events/s', met: rate >= 20_000 } },
      { measure: 'ratio to bare insert', value: Number(ratio.toFixed(2)), unit: 'x', budget: { text: '>= 0.5', met: ratio >= 0.5 } },
      { measure: 'projector CPU per 1,000 events', value: Number(((1e6 * (cpu.processes.projector ?? 0)) / Math.max(1, rate)).toFixed(1)), unit: 'ms' },
      { measure: 'all metric events published', value: Number(((metricsDoneAt - firstAt) / 1000).toFixed(2)), unit: 's after the first row' },
    ],
    details: {
      events: total,
      withContact,
      fillSeconds,
      baseline: { seconds: baselineSeconds, batch: BASELINE_BATCH },
      projector: { startToFirstRowSeconds: (firstAt - spawned) / 1000, firstRowsSeen: first, seconds, cpu, serverMetrics },
    },
    notes: [
      `${total.toLocaleString('en-US')} event records (${withContact.toLocaleString('en-US')} with a contact) pre-filled on a ${12}-partition topic; the rate is timed from the first activity row to the last (process start excluded).`,
      `Baseline: the same rows inserted bare (activities, contact_timeline, outbox; unnest multi-row INSERTs, ${BASELINE_BATCH} rows per transaction, one connection).`,
    ],
  };
}

/** The projector's writes without the projector: no parsing, no validation, no offsets, no outbox drain. */
async function bareInsert(tx: Queryable, events: EventRecord[]): Promise<void> {
  const now = new Date();
  await tx.query(sql`
    INSERT INTO activities (shop_id, id, name, description, event_time, recorded_at, metric, contact_id, contact, remote_id, remote_platform)
    SELECT u.shop_id, u.id, u.name, u.description, u.event_time, ${now}::timestamptz, u.metric, u.contact_id, u.contact, u.remote_id, u.remote_platform
    FROM unnest(
      ${events.map((e) => e.shop_id)}::uuid[], ${events.map((e) => e.activity_id)}::uuid[], ${events.map((e) => e.name)}::text[],
      ${events.map((e) => e.description)}::text[], ${events.map((e) => e.event_time)}::timestamptz[],
      ${events.map((e) => JSON.stringify(e.metric))}::jsonb[], ${events.map((e) => e.contact?.id ?? null)}::uuid[],
      ${events.map((e) => (e.contact ? JSON.stringify(e.contact) : null))}::jsonb[], ${events.map((e) => e.remote_id)}::text[],
      ${events.map((e) => e.remote_platform)}::text[]
    ) AS u(shop_id, id, name, description, event_time, metric, contact_id, contact, remote_id, remote_platform)`);
  const timeline = events.filter((e) => e.contact !== null);
  await tx.query(sql`
    INSERT INTO contact_timeline (shop_id, contact_id, activity_id, event_time)
    SELECT * FROM unnest(${timeline.map((e) => e.shop_id)}::uuid[], ${timeline.map((e) => e.contact!.id)}::uuid[],
      ${timeline.map((e) => e.activity_id)}::uuid[], ${timeline.map((e) => e.event_time)}::timestamptz[])`);
  await tx.query(sql`
    INSERT INTO outbox (topic, key, value, headers)
    SELECT * FROM unnest(${events.map(() => 'metrics')}::text[], ${events.map((e) => e.shop_id)}::text[],
      ${events.map((e) => JSON.stringify(e))}::text[], ${events.map(() => '{"schema":"metric-event.v1"}')}::jsonb[])`);
}
