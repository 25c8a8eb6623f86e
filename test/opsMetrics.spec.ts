import { afterAll, beforeAll, expect, it } from 'vitest';
import { sql } from '@shopstream/db';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { projectionDefinitions, services } from '@shopstream/all-in-one';
import { startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';
import { metricNames, opsExpressions } from './opsFiles.js';

/**
 * Every metric a dashboard or an alert rule of ops/ reads is one a running Shopstream exports: the all-in-one's
 * services on real Kafka and PostgreSQL, /metrics read as Prometheus reads it. A histogram is read as its
 * `_bucket`, `_sum` and `_count` series.
 */
let rt: Runtime;
let server: TestServer;
const started: StartedService[] = [];
beforeAll(async () => {
  rt = await startTestRuntime({}, 'ops-metrics');
  for (const s of services) started.push(await s.start(rt));
  server = await startTestServer(rt, started, projectionDefinitions(rt.env));
});
afterAll(async () => {
  await server?.stop();
  for (const s of started.reverse()) await s.stop();
  await rt?.close();
});

/** The families /metrics declares, by name, with their type. */
async function families(): Promise<Map<string, string>> {
  const text = await (await fetch(`${server.baseUrl}/metrics`)).text();
  return new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1], m[2]]));
}

function exported(name: string, types: Map<string, string>): boolean {
  if (types.has(name)) return types.get(name) !== 'histogram';
  const base = /^(.*)_(bucket|sum|count)$/.exec(name)?.[1];
  return base !== undefined && types.get(base) === 'histogram';
}

it('exports every metric the dashboards and alert rules name', async () => {
  // Consumer state is tracked once the consumers run.
  await waitFor(async () => (await families()).has('shopstream_consumer_up'), { message: 'consumers tracked on /metrics' });
  const types = await families();
  const named = opsExpressions().flatMap((e) => metricNames(e.expr).map((name) => ({ where: e.where, name })));
  expect(named.length).toBeGreaterThan(40);
  expect(named.filter((n) => !exported(n.name, types))).toEqual([]);
});

it('reads the outbox backlog and the rebuilds from the database at each scrape', async () => {
  const text = await (await fetch(`${server.baseUrl}/metrics`)).text();
  expect(text).toContain(`shopstream_outbox_backlog_rows{topic="${rt.topics.metrics}"} 0`);
  expect(text).toContain(`shopstream_outbox_backlog_rows{topic="${rt.topics.flowTriggers}"} 0`);
  for (const p of ['activity-projector', 'flow-matcher', 'conversation-projector'])
    expect(text).toContain(`shopstream_projection_rebuild_running{projection="${p}"} 0`);
  // A row nobody relays (a topic no relay serves) is counted with its age.
  await rt.db.query(
    sql`INSERT INTO outbox (topic, key, value, headers, created_at) VALUES ('ops-test.unrelayed', 'k', '{}', '{}', now() - interval '10 minutes')`,
  );
  const after = await (await fetch(`${server.baseUrl}/metrics`)).text();
  expect(after).toContain('shopstream_outbox_backlog_rows{topic="ops-test.unrelayed"} 1');
  const age = Number(/^shopstream_outbox_oldest_row_seconds\{topic="ops-test\.unrelayed"\} (\S+)$/m.exec(after)?.[1]);
  expect(age).toBeGreaterThanOrEqual(600);
});
