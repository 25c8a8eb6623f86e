import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { Parser } from '@asyncapi/parser';
import { DLQ_HEADERS_SCHEMA, headers as H, topicContracts } from '@shopstream/contracts';
import type { BusRecord } from '@shopstream/bus';
import type { Runtime } from '@shopstream/runtime';
import { serviceFactories } from '@shopstream/all-in-one';
import { createTestShop, readTopic, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';
import { conversationWithMessage } from '@shopstream/testkit';

/**
 * The topics' machine-readable contracts on a real broker: the AsyncAPI document every service serves, and
 * records read back validating against the JSON Schema file their header names (test/topicContracts.unit.spec.ts
 * checks the files against the zod contracts).
 */
const repo = path.resolve(import.meta.dirname, '..');
const schemaFile = (name: string) => path.join(repo, 'packages/contracts/schemas', `${name}.json`);
const checkedIn = (name: string) => JSON.parse(readFileSync(schemaFile(name), 'utf8')) as Record<string, any>;
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (ajv: Ajv2020) => Ajv2020;

describe('on a real broker', () => {
  let rt: Runtime;
  let server: TestServer;
  const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-contracts-'));
  beforeAll(async () => {
    rt = await startTestRuntime({ FLOW_REFRESH_MS: '300' }, 'contracts');
    const started = [];
    for (const f of Object.values(serviceFactories)) started.push(await f(rt));
    server = await startTestServer(rt, started);
  });
  afterAll(async () => {
    await server?.stop();
    await rt?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves an AsyncAPI 3.0 document at /asyncapi.json that @asyncapi/parser accepts, naming every topic', async () => {
    const doc = await (await fetch(`${server.baseUrl}/asyncapi.json`)).json();
    const { document, diagnostics } = await new Parser().parse(doc);
    expect(diagnostics.filter((d) => d.severity === 0).map((d) => `${d.path.join('.')}: ${d.message}`)).toEqual([]);
    expect(document).toBeDefined();
    const addresses = document!
      .channels()
      .all()
      .map((c) => c.address())
      .sort();
    const t = rt.topics;
    expect(addresses).toEqual([t.events, t.metrics, t.flowTriggers, t.conversations, t.erasures].flatMap((x) => [x, t.dlq(x)]).sort());
    expect(document!.operations().all().length).toBeGreaterThanOrEqual(16);
    const docsPage = await (await fetch(`${server.baseUrl}/docs/`)).text();
    expect(docsPage).toContain('href="/asyncapi.json"');
  });

  it('records the services write validate against the schema file their header names', async () => {
    const shop = await createTestShop(rt);
    const call = (method: string, p: string, body: unknown) =>
      fetch(`${server.baseUrl}/v2026-04${p}`, { method, headers: shop.headers, body: JSON.stringify(body) }).then(async (r) => ({
        status: r.status,
        body: (await r.json()) as any,
      }));
    const flow = await call('POST', '/flows/', { name: 'All orders', trigger: { metric_name: 'placed_order' } });
    expect(flow.status).toBe(201);
    await waitFor(async () => /^shopstream_flow_matcher_active_flows [1-9]/m.test(await (await fetch(`${server.baseUrl}/metrics`)).text()), {
      message: 'the flow loaded',
    });
    const ids: string[] = [];
    for (const body of [
      {
        name: 'Placed order',
        metric: { metric_name: 'placed_order', value: 12.5, additional_properties: { cart: { total: 12.5 } } },
        contact: { email: 'ada@example.com', phone: '+14155552671' },
      },
      { name: 'Viewed', metric: { metric_name: 'viewed_product' }, remote_id: 'v-1', remote_platform: 'web', event_time: '2026-03-01T10:00:00+02:00' },
    ]) {
      const r = await call('POST', '/events/', body);
      expect(r.status).toBe(202);
      ids.push(r.body.activity_id);
    }
    // A record no projector can read: its dead letter carries the DLQ headers.
    await rt.bus.publish(rt.topics.events, [
      { key: shop.shopId, value: '{"broken": ', headers: { [H.contentType]: 'application/json', [H.schema]: 'event-recorded.v1', [H.shopId]: shop.shopId } },
    ]);
    // Conversations as the CLI imports them.
    const file = path.join(dir, 'c.jsonl');
    writeFileSync(
      file,
      conversationWithMessage(shop.shopId, { at: new Date().toISOString(), text: 'hello', tags: ['t'] })
        .map((r) => JSON.stringify(r))
        .join('\n') + '\n',
    );
    const env = {
      ...process.env,
      DATABASE_URL: rt.env.DATABASE_URL,
      KAFKA_BROKERS: rt.env.KAFKA_BROKERS!.join(','),
      TOPIC_PREFIX: rt.env.TOPIC_PREFIX,
      KAFKA_PARTITIONS: String(rt.env.KAFKA_PARTITIONS),
      LOG_LEVEL: 'warn',
    };
    await promisify(execFile)('pnpm', ['-s', 'cli', 'conversations', 'import', file], { cwd: repo, env, timeout: 120_000 });

    const mine = (rs: BusRecord[]) => rs.filter((r) => r.key === shop.shopId);
    const t = rt.topics;
    const read = async (topic: string, n: number) => mine(await readTopic(rt, topic, (rs) => mine(rs).length >= n, 60_000));
    const ajv = addFormats(new Ajv2020({ allErrors: true, strict: false }));
    const validators = new Map(Object.keys(topicContracts).map((name) => [name, ajv.compile(checkedIn(name))]));
    const check = (r: BusRecord, value: unknown, name: string) => {
      const validate = validators.get(name);
      expect(validate, `${r.topic}/${r.partition}/${r.offset}: no schema file for "${name}"`).toBeDefined();
      expect(validate!(value), `${r.topic}/${r.partition}/${r.offset} against ${name}: ${ajv.errorsText(validate!.errors)}`).toBe(true);
    };
    const records = [
      ...(await read(t.events, 3)).filter((r) => !r.value.toString().startsWith('{"broken"')),
      ...(await read(t.metrics, 2)),
      ...(await read(t.flowTriggers, 1)),
      ...(await read(t.conversations, 2)),
    ];
    expect(records.map((r) => r.topic).sort()).toEqual([t.conversations, t.conversations, t.events, t.events, t.flowTriggers, t.metrics, t.metrics].sort());
    for (const r of records) check(r, JSON.parse(r.value.toString('utf8')), r.headers[H.schema]);
    const [dead] = await read(t.dlq(t.events), 1);
    check(dead, dead.headers, DLQ_HEADERS_SCHEMA);
    // And a header that names nothing fails: the check can fail.
    expect(validators.get('metric-event.v1')!(JSON.parse(records.find((r) => r.topic === t.events)!.value.toString()))).toBe(false);
  }, 180_000);
});
