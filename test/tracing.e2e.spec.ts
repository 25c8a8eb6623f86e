import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '@shopstream/db';
import type { BusRecord } from '@shopstream/bus';
import type { Runtime } from '@shopstream/runtime';
import { startQueryApi } from '@shopstream/query-api';
import { createTestShop, json, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';
import { killShopstreams, spawnShopstream, type ShopstreamProcess } from './shopstreamProcess.js';

/**
 * One trace across three processes: ingest-api, the activity projector and the flow matcher each run as their
 * own process (their real main.ts) with OTEL_TRACES_EXPORTER=otlp, exporting to an OTLP/HTTP receiver this test
 * runs. A request with a `traceparent` is followed through `events`, the Activity, the `metrics` record and the
 * `flow-triggers` record: every span and every record header is in the request's trace, each one the child of
 * the one before it.
 */

/** A span as OTLP/JSON carries it (ids in hex), with the service that exported it. */
interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  links: { traceId: string; spanId: string }[];
}
const SERVER = 2;
const PRODUCER = 4;
const CONSUMER = 5;
const CLIENT = 3;

type AnyValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
const valueOf = (v: AnyValue): unknown => v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.boolValue ?? v.doubleValue));
const attributesOf = (kvs: { key: string; value: AnyValue }[] = []) => Object.fromEntries(kvs.map((kv) => [kv.key, valueOf(kv.value)]));

/** An OTLP/HTTP receiver of traces in JSON (what @opentelemetry/exporter-trace-otlp-http sends). */
function otlpReceiver(): { spans: ReceivedSpan[]; contentTypes: Set<string>; start(): Promise<string>; stop(): Promise<void> } {
  const spans: ReceivedSpan[] = [];
  const contentTypes = new Set<string>();
  let server: Server;
  return {
    spans,
    contentTypes,
    start: () =>
      new Promise((resolve) => {
        server = createServer((req, res) => {
          let body = '';
          req.setEncoding('utf8');
          req.on('data', (d: string) => (body += d));
          req.on('end', () => {
            contentTypes.add(`${req.method} ${req.url} ${req.headers['content-type']}`);
            if (req.url === '/v1/traces' && req.headers['content-type']?.startsWith('application/json')) {
              const payload = JSON.parse(body) as { resourceSpans: any[] };
              for (const rs of payload.resourceSpans) {
                const service = String(attributesOf(rs.resource?.attributes)['service.name']);
                for (const ss of rs.scopeSpans ?? [])
                  for (const s of ss.spans ?? [])
                    spans.push({
                      service,
                      traceId: s.traceId,
                      spanId: s.spanId,
                      parentSpanId: s.parentSpanId || undefined,
                      name: s.name,
                      kind: s.kind,
                      attributes: attributesOf(s.attributes),
                      links: (s.links ?? []).map((l: any) => ({ traceId: l.traceId, spanId: l.spanId })),
                    });
              }
            }
            res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
          });
        });
        server.listen(0, '127.0.0.1', () => {
          const a = server.address();
          resolve(`http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}`);
        });
      }),
    stop: () => new Promise((r) => server?.close(() => r())),
  };
}

let rt: Runtime;
let query: TestServer;
const receiver = otlpReceiver();
const procs: ShopstreamProcess[] = [];

beforeAll(async () => {
  rt = await startTestRuntime({ CONSUMER_GROUP_PREFIX: `tracing-spec-${randomUUID()}.` }, 'tracing-spec');
  // Flows are managed over query-api, in this process, which exports nothing.
  query = await startTestServer(rt, [await startQueryApi(rt)]);
  const endpoint = await receiver.start();
  const env = {
    DATABASE_URL: rt.env.DATABASE_URL!,
    KAFKA_BROKERS: rt.env.KAFKA_BROKERS!.join(','),
    KAFKA_CLIENT: rt.env.KAFKA_CLIENT,
    TOPIC_PREFIX: rt.env.TOPIC_PREFIX,
    KAFKA_PARTITIONS: String(rt.env.KAFKA_PARTITIONS),
    CONSUMER_GROUP_PREFIX: rt.env.CONSUMER_GROUP_PREFIX,
    KAFKA_GROUP_INSTANCE_ID: 'none',
    INGEST_RATE_LIMIT_PER_SECOND: '0',
    INGEST_RATE_LIMIT_PER_MINUTE: '0',
    FLOW_REFRESH_MS: '500',
    LOG_LEVEL: 'info',
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    // Export within 100 ms of a span's end rather than 5 s.
    OTEL_BSP_SCHEDULE_DELAY: '100',
  };
  for (const service of ['ingest-api', 'activity-projector', 'flow-matcher'])
    procs.push(spawnShopstream([process.execPath, '--conditions=@shopstream/source', '--import', 'tsx', `services/${service}/src/main.ts`], env));
});
afterAll(async () => {
  killShopstreams();
  await query?.stop();
  await receiver.stop();
});

/** The port a service process listens on, from its `listening` log line. */
const portOf = (p: ShopstreamProcess) =>
  waitFor(
    () => {
      if (p.child.exitCode !== null) throw new Error(`${p.child.spawnargs.join(' ')} exited ${p.child.exitCode}:\n${p.output()}`);
      return /"port":(\d+)[^\n]*"msg":"listening"/.exec(p.output())?.[1];
    },
    { timeoutMs: 90_000, message: 'the listening line' },
  );

/** The one record of a topic whose value satisfies `match`. */
async function recordOf(topic: string, match: (value: any) => boolean): Promise<BusRecord> {
  return waitFor(async () => (await rt.bus.read(topic)).find((r) => match(json(r))), { timeoutMs: 120_000, message: `the record on ${topic}` });
}

const traceparentParts = (h: string | undefined) => {
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/.exec(h ?? '');
  if (!m) throw new Error(`not a traceparent: ${h}`);
  return { traceId: m[1], spanId: m[2] };
};

describe('a trace through the log', () => {
  it('follows one traceparent from the HTTP request through events, the Activity, the metric event and a flow trigger', { timeout: 300_000 }, async () => {
    const shop = await createTestShop(rt);
    const flow = await fetch(`${query.baseUrl}/v2026-04/flows/`, {
      method: 'POST',
      headers: shop.headers,
      body: JSON.stringify({ name: 'traced', trigger: { metric_name: 'traced_order' } }),
    });
    expect(flow.status).toBe(201);
    const flowId = ((await flow.json()) as { id: string }).id;

    const ingestPort = await portOf(procs[0]);
    const traceId = randomBytes(16).toString('hex');
    const callerSpanId = randomBytes(8).toString('hex');
    // The flow index reloads every FLOW_REFRESH_MS; an event recorded after the flow was created matches it.
    const res = await fetch(`http://127.0.0.1:${ingestPort}/v2026-04/events/`, {
      method: 'POST',
      headers: { ...shop.headers, traceparent: `00-${traceId}-${callerSpanId}-01` },
      body: JSON.stringify({ name: 'Order', metric: { metric_name: 'traced_order', value: 12 } }),
    });
    expect(res.status).toBe(202);
    const activityId = ((await res.json()) as { activity_id: string }).activity_id;

    // The records, each carrying the trace in its traceparent header.
    const event = await recordOf(rt.topics.events, (v) => v.activity_id === activityId);
    const metric = await recordOf(rt.topics.metrics, (v) => v.id === activityId);
    const trigger = await recordOf(rt.topics.flowTriggers, (v) => v.metric_event_id === activityId && v.flow_id === flowId);
    expect((await rt.db.query(sql`SELECT id FROM activities WHERE shop_id = ${shop.shopId} AND id = ${activityId}`)).length).toBe(1);
    const onEvent = traceparentParts(event.headers.traceparent);
    const onMetric = traceparentParts(metric.headers.traceparent);
    const onTrigger = traceparentParts(trigger.headers.traceparent);
    expect([onEvent.traceId, onMetric.traceId, onTrigger.traceId]).toEqual([traceId, traceId, traceId]);

    // The spans, once every service has exported its part.
    const inTrace = () => receiver.spans.filter((s) => s.traceId === traceId);
    const find = (service: string, kind: number, name: string, parent?: string) =>
      inTrace().find((s) => s.service === service && s.kind === kind && s.name === name && (parent === undefined || s.parentSpanId === parent));
    const server = await waitFor(() => find('ingest-api', SERVER, 'POST /v2026-04/events/'), { timeoutMs: 60_000, message: "ingest-api's server span" }).catch(
      (e: Error) => {
        throw new Error(`${e.message}; spans received: ${JSON.stringify(receiver.spans.map((s) => [s.service, s.name, s.kind, s.traceId, s.parentSpanId]))}`);
      },
    );
    expect(server.parentSpanId).toBe(callerSpanId);
    expect(server.attributes).toMatchObject({ 'http.request.method': 'POST', 'http.route': '/v2026-04/events/', 'http.response.status_code': 202 });

    // ingest: the send span, child of the request's; the events record continues it.
    const send = await waitFor(() => find('ingest-api', PRODUCER, `send ${rt.topics.events}`, server.spanId), { timeoutMs: 60_000, message: 'the send span' });
    expect(send.attributes).toMatchObject({ 'messaging.system': 'kafka', 'messaging.operation.type': 'send', 'messaging.destination.name': rt.topics.events });
    expect(onEvent.spanId).toBe(send.spanId);

    // The activity projector: a process span per record, child of the send span; its queries under it (a batch
    // of one record) or under the batch span; the metric event continues the record's span.
    const projected = await waitFor(() => find('activity-projector', CONSUMER, `process ${rt.topics.events}`, send.spanId), {
      timeoutMs: 60_000,
      message: "the activity projector's process span",
    });
    expect(projected.attributes).toMatchObject({
      'messaging.operation.type': 'process',
      'messaging.destination.name': rt.topics.events,
      'messaging.consumer.group.name': `${rt.env.CONSUMER_GROUP_PREFIX}activity-projector`,
      'messaging.destination.partition.id': String(event.partition),
      'messaging.kafka.offset': Number(event.offset),
    });
    expect(onMetric.spanId).toBe(projected.spanId);
    // Its relay's send span of the metrics topic links the record's context.
    const relayed = await waitFor(
      () =>
        receiver.spans.find(
          (s) => s.service === 'activity-projector' && s.kind === PRODUCER && s.links.some((l) => l.traceId === traceId && l.spanId === projected.spanId),
        ),
      { timeoutMs: 60_000, message: "the outbox relay's send span" },
    );
    expect(relayed.name).toBe(`send ${rt.topics.metrics}`);

    // The flow matcher: its process span is the child of the projector's; the trigger continues it.
    const matched = await waitFor(() => find('flow-matcher', CONSUMER, `process ${rt.topics.metrics}`, projected.spanId), {
      timeoutMs: 60_000,
      message: "the flow matcher's process span",
    });
    expect(onTrigger.spanId).toBe(matched.spanId);
    // Its transaction's statements are PostgreSQL client spans of the same trace (the checkpoint, the insert).
    const queries = await waitFor(
      () => {
        const q = inTrace().filter((s) => s.service === 'flow-matcher' && s.kind === CLIENT);
        return q.some((s) => s.name === 'INSERT flow_triggers') ? q : undefined;
      },
      { timeoutMs: 60_000, message: "the flow matcher's PostgreSQL spans" },
    );
    for (const q of queries)
      expect(q.attributes).toMatchObject({ 'db.system.name': 'postgresql', 'db.namespace': new URL(rt.env.DATABASE_URL!).pathname.slice(1) });
    const batchOrRecord = new Set(
      inTrace()
        .filter((s) => s.service === 'flow-matcher' && s.kind === CONSUMER)
        .map((s) => s.spanId),
    );
    // A batch span of several records is a trace of its own, linking each record's: the queries of this trace
    // hang under the record's span.
    expect(queries.every((q) => q.parentSpanId !== undefined && batchOrRecord.has(q.parentSpanId))).toBe(true);

    // The AsyncAPI document names the header on every topic's messages.
    const doc = (await (await fetch(`http://127.0.0.1:${ingestPort}/asyncapi.json`)).json()) as { components: { messages: Record<string, any> } };
    for (const [id, m] of Object.entries(doc.components.messages)) {
      const headers = m.headers.properties ?? m.headers.allOf.find((h: any) => h.properties).properties;
      expect(headers.traceparent?.pattern, `${id}: traceparent`).toBe('^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');
    }

    // Every span the three services sent went through the OTLP/HTTP JSON exporter.
    expect([...receiver.contentTypes]).toEqual(['POST /v1/traces application/json']);
  });
});
