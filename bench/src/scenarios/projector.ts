import { randomUUID } from 'node:crypto';
import { CompressionTypes } from 'kafkajs';
import { headers as H, schemas, type EventRecord } from '@shopstream/contracts';
import { sql } from '@shopstream/db';
import { createLogger } from '@shopstream/telemetry';
import { ContactKeys, openKeyring, sealEventRecords } from '@shopstream/privacy';
import { bareRate, BASELINE_BATCH } from '../writePaths.js';
import type { Bench } from '../context.js';
import { eventMaker, eventRecordOf } from '../events.js';
import type { ScenarioResult } from '../report.js';
import { sleep } from '../stats.js';
import { cpuMeter } from '@shopstream/testkit/cpu';
import { scrapeHistograms, SERVICE_HISTOGRAMS } from '../promMetrics.js';

/**
 * The activity projector draining a pre-filled `events` topic, against the best bare write of the same rows
 * into the same tables (activities, contact_timeline, outbox): a multi-row insert and a COPY, one transaction
 * per 1,000 rows on one connection (writePaths.ts).
 */
export async function projector(b: Bench): Promise<ScenarioResult> {
  const total = b.opts.events;
  await b.createTopics();

  // The topic: records exactly as ingest-api writes them, spread over the shops: those with a contact sealed
  // under the contact's data key (event-recorded.v2), the keys made in this database as ingest makes them, so
  // the projector opens them as in production. BENCH_PROJECTOR_PLAIN=1 writes them unsealed (event-recorded.v1,
  // as before issue 24) to measure what opening costs, in the same code.
  const plain = process.env.BENCH_PROJECTOR_PLAIN === '1';
  const keyring = await openKeyring({ env: process.env, db: b.db, logger: createLogger('bench', 'warn') });
  const keys = new ContactKeys(b.db, keyring);
  const records: EventRecord[] = [];
  const makers = b.shops.map((s, i) => ({ shop: s.shopId, maker: eventMaker({ seed: `proj-${i}-${Date.now()}` }) }));
  const producer = b.kafka('bench-prefill').producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const fillStart = performance.now();
  for (let sent = 0; sent < total;) {
    const n = Math.min(500, total - sent);
    const batch: EventRecord[] = [];
    for (let i = 0; i < n; i++) {
      const { shop, maker } = makers[(sent + i) % makers.length];
      batch.push(eventRecordOf(shop, maker.event(), randomUUID()));
    }
    records.push(...batch);
    // Sealed a shop at a time (one key look-up per shop and batch), written in the order made.
    const stored = new Map<EventRecord, unknown>();
    for (const shop of new Set(batch.map((r) => r.shop_id))) {
      const ofShop = batch.filter((r) => r.shop_id === shop);
      const values = plain ? ofShop : await sealEventRecords(keys, shop, ofShop);
      ofShop.forEach((r, j) => stored.set(r, values[j]));
    }
    const messages = batch.map((r) => ({
      key: r.shop_id,
      value: JSON.stringify(stored.get(r)),
      headers: { [H.contentType]: 'application/json', [H.schema]: plain ? schemas.eventRecorded : schemas.eventRecordedV2, [H.shopId]: r.shop_id },
    }));
    await producer.send({ topic: b.topics.events, acks: -1, compression: CompressionTypes.None, messages });
    sent += n;
  }
  await producer.disconnect();
  await keys.close();
  const fillSeconds = (performance.now() - fillStart) / 1000;
  const withContact = records.filter((r) => r.contact !== null).length;

  // Baselines: the same rows, bare, by multi-row insert and by COPY, alternately (twice each: the machine is shared).
  const bare = { insert: [] as number[], copy: [] as number[] };
  for (let round = 0; round < 2; round++) for (const how of ['insert', 'copy'] as const) bare[how].push(await bareRate(b.db, how, records));
  const best = (xs: number[]) => Math.max(...xs);
  const baselineRate = Math.max(best(bare.insert), best(bare.copy));
  const baselineName = best(bare.copy) >= best(bare.insert) ? 'bare COPY' : 'bare multi-row insert';

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
      {
        measure: 'activity projector',
        value: rate,
        unit: 'events/s',
        baseline: { name: baselineName, value: baselineRate },
        ratio,
        budget: { text: '>= 15,000 events/s', met: rate >= 15_000 },
      },
      { measure: 'ratio to the best bare write', value: Number(ratio.toFixed(2)), unit: 'x', budget: { text: '>= 1', met: ratio >= 1 } },
      {
        measure: 'bare multi-row insert',
        value: best(bare.insert),
        unit: 'rows/s',
        baseline: { name: 'bare COPY', value: best(bare.copy) },
        ratio: best(bare.insert) / best(bare.copy),
      },
      { measure: 'projector CPU per 1,000 events', value: Number(((1e6 * (cpu.processes.projector ?? 0)) / Math.max(1, rate)).toFixed(1)), unit: 'ms' },
      { measure: 'all metric events published', value: Number(((metricsDoneAt - firstAt) / 1000).toFixed(2)), unit: 's after the first row' },
    ],
    details: {
      events: total,
      sealed: !plain,
      withContact,
      fillSeconds,
      baseline: { batch: BASELINE_BATCH, insertRowsPerSecond: bare.insert, copyRowsPerSecond: bare.copy },
      projector: { startToFirstRowSeconds: (firstAt - spawned) / 1000, firstRowsSeen: first, seconds, cpu, serverMetrics },
    },
    notes: [
      `${total.toLocaleString('en-US')} event records (${withContact.toLocaleString('en-US')} with a contact, ${plain ? 'unsealed (BENCH_PROJECTOR_PLAIN=1)' : "sealed under their contact's data key"}) pre-filled on a ${12}-partition topic; the rate is timed from the first activity row to the last (process start excluded).`,
      `Baselines: the same rows written bare into activities, contact_timeline and outbox, ${BASELINE_BATCH} rows per transaction on one connection, by unnest multi-row INSERTs and by COPY FROM STDIN (two rounds each, alternating; the best of each).`,
    ],
  };
}
