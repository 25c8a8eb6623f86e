/**
 * How many bytes of the broker's disk one accepted event takes on the `events` topic (docs/ingest.md, "How
 * large the log grows"). Posts realistic events (bench/src/events.ts) through the real ingest-api, in bulk
 * requests of 100 and as single requests, each to topics of their own, then adds up the partitions' segment
 * files (`*.log`) in the broker's log directory: what the broker stores (record batches with their headers,
 * keys and batch overhead, uncompressed as Shopstream sends them), without its indexes.
 *
 *   KAFKA_BROKERS=127.0.0.1:9092 DATABASE_URL=postgres://postgres@127.0.0.1:5432/shopstream \
 *   KAFKA_LOG_DIR=/path/to/broker/log.dirs node --import tsx bench/src/logBytesPerEvent.ts [events]
 *
 * Per replica: with replication factor 3 the cluster stores three times this.
 */
import { randomUUID } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { loadEnv } from '@shopstream/config';
import { startIngestApi } from '@shopstream/ingest-api';
import { openRuntime, serve, type Runtime } from '@shopstream/runtime';
import { createTestDatabase } from '@shopstream/testkit';
import { eventMaker } from './events.js';

const N = Number(process.argv[2] ?? 20_000);
const logDir = process.env.KAFKA_LOG_DIR;
if (!logDir || !process.env.KAFKA_BROKERS || !process.env.DATABASE_URL) {
  throw new Error("set KAFKA_BROKERS, DATABASE_URL and KAFKA_LOG_DIR (the broker's log.dirs, on this machine)");
}

/** Bytes of the topic's segment files, and of the event JSON alone, over every partition. */
function segmentBytes(topic: string): number {
  let total = 0;
  for (const dir of readdirSync(logDir!).filter((d) => d.startsWith(`${topic}-`) && /-\d+$/.test(d))) {
    for (const f of readdirSync(path.join(logDir!, dir)).filter((f) => f.endsWith('.log'))) total += statSync(path.join(logDir!, dir, f)).size;
  }
  return total;
}

async function measure(mode: 'bulk' | 'single'): Promise<void> {
  const prefix = `measure-${randomUUID().slice(0, 8)}.`;
  const env = loadEnv({
    ...process.env,
    DATABASE_URL: await createTestDatabase(process.env.DATABASE_URL!),
    TOPIC_PREFIX: prefix,
    KAFKA_PARTITIONS: '12',
    LOG_LEVEL: 'warn',
    INGEST_RATE_LIMIT_PER_SECOND: '0',
    INGEST_RATE_LIMIT_PER_MINUTE: '0',
  });
  const rt: Runtime = await openRuntime(env, 'measure');
  const { server, stop } = await serve(rt, [await startIngestApi(rt)], { port: 0, host: '127.0.0.1', name: 'measure' });
  try {
    const shop = randomUUID();
    const { secret } = await rt.apiKeys.create([shop], 'measure');
    const headers = { authorization: `Bearer ${secret}`, 'x-shop-id': shop, 'content-type': 'application/json' };
    const base = `http://127.0.0.1:${server.port}/v2026-04/events/`;
    const maker = eventMaker({ seed: prefix });
    let jsonBytes = 0;
    const post = async (url: string, body: unknown, expected: number) => {
      const text = JSON.stringify(body);
      const res = await fetch(url, { method: 'POST', headers, body: text });
      if (res.status !== expected) throw new Error(`${url}: ${res.status} ${await res.text()}`);
      await res.arrayBuffer();
    };
    if (mode === 'bulk') {
      for (let sent = 0; sent < N; sent += 100) {
        const events = Array.from({ length: Math.min(100, N - sent) }, () => maker.event());
        jsonBytes += events.reduce((n, e) => n + Buffer.byteLength(JSON.stringify(e)), 0);
        await post(`${base}bulk/`, { events }, 200);
      }
    } else {
      // 32 at a time: concurrent requests share a Kafka send (INGEST_LINGER_MS), as under real traffic.
      let sent = 0;
      await Promise.all(
        Array.from({ length: 32 }, async () => {
          while (sent < N) {
            sent++;
            const e = maker.event();
            jsonBytes += Buffer.byteLength(JSON.stringify(e));
            await post(base, e, 202);
          }
        }),
      );
    }
    const [end] = [await rt.bus.offsets(rt.topics.events)].map((ps) => ps.reduce((n, p) => n + Number(p.high), 0));
    const bytes = segmentBytes(rt.topics.events);
    console.log(
      `${mode}: ${end} records on ${rt.topics.events}, ${bytes} bytes of segments: ${(bytes / end).toFixed(0)} bytes per event ` +
        `(the request's event JSON averaged ${(jsonBytes / N).toFixed(0)} bytes)`,
    );
  } finally {
    await stop();
    await rt.close();
  }
}

await measure('bulk');
await measure('single');
