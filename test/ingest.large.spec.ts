import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serviceFactories } from '@shopstream/all-in-one';
import type { Runtime } from '@shopstream/runtime';
import { createTestShop, readTopic, startTestRuntime, startTestServer, type TestServer } from '@shopstream/harness';

// The broker refuses a record batch over the topic's max.message.bytes (1 MiB by default): a bulk request
// the API accepts (up to 10 MiB) must never be refused by the log for its size.
describe('a bulk request near the body limit', () => {
  let rt: Runtime;
  let server: TestServer;
  beforeAll(async () => {
    rt = await startTestRuntime();
    server = await startTestServer(rt, [await serviceFactories['ingest-api'](rt)]);
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('is written whole: 100 events of 60 KiB properties each, all to one shop partition', async () => {
    const shop = await createTestShop(rt);
    const blob = 'x'.repeat(60 * 1024);
    const events = Array.from({ length: 100 }, (_, i) => ({
      name: `Big ${i}`,
      metric: { metric_name: 'big', additional_properties: { blob }, deduping_key: `big-${i}` },
    }));
    const body = JSON.stringify({ events });
    expect(body.length).toBeGreaterThan(6_000_000);
    const res = await fetch(`${server.baseUrl}/v2026-04/events/bulk/`, { method: 'POST', headers: shop.headers, body });
    expect(res.status).toBe(200);
    const { results } = (await res.json()) as { results: { status: string; event: { activity_id: string } }[] };
    expect(results.map((r) => r.status)).toEqual(Array(100).fill('success'));
    const records = await readTopic(rt, rt.topics.events, (rs) => rs.length >= 100, 120_000);
    const ids = new Set(records.map((r) => JSON.parse(r.value.toString()).activity_id));
    expect(ids).toEqual(new Set(results.map((r) => r.event.activity_id)));
  }, 240_000);
});
