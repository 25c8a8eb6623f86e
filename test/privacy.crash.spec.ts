import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { sql } from '@shopstream/db';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startActivityProjector } from '@shopstream/activity-projector';
import { createTestShop, exitOf, json, readTopic, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';

/**
 * An erasure job survives a kill -9 of the process running it: query-api (its worker) runs as its own process;
 * the test holds a lock the job needs (the contact's key row, FOR KEY SHARE, as a projector does), so the job is
 * certainly inside its transaction when the process is killed. After a restart the job completes, once.
 */
const root = path.resolve(import.meta.dirname, '..');
let rt: Runtime;
let server: TestServer;
let child: ChildProcess | undefined;

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });

function startQueryApi(port: number): ChildProcess {
  return spawn(process.execPath, ['--conditions=@shopstream/source', '--import', 'tsx', path.join(root, 'services/query-api/src/main.ts')], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: rt.env.DATABASE_URL,
      KAFKA_BROKERS: rt.env.KAFKA_BROKERS!.join(','),
      TOPIC_PREFIX: rt.env.TOPIC_PREFIX,
      KAFKA_PARTITIONS: String(rt.env.KAFKA_PARTITIONS),
      CONSUMER_GROUP_PREFIX: rt.env.CONSUMER_GROUP_PREFIX,
      ERASURE_POLL_MS: '200',
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
}

beforeAll(async () => {
  rt = await startTestRuntime({}, 'privacy-crash');
  server = await startTestServer(rt, [await startIngestApi(rt), await startActivityProjector(rt)]);
});
afterAll(async () => {
  child?.kill('SIGKILL');
  await server?.stop();
  await rt?.close();
});

it('a job interrupted by kill -9 completes after the restart', async () => {
  const shop = await createTestShop(rt);
  const email = `crash-${Date.now()}@example.com`;
  const posted = await fetch(`${server.baseUrl}/v2026-04/events/`, {
    method: 'POST',
    headers: shop.headers,
    body: JSON.stringify({ name: 'Order', metric: { metric_name: 'placed_order' }, contact: { email } }),
  });
  expect(posted.status).toBe(202);
  const { activity_id: activityId, contact } = (await posted.json()) as { activity_id: string; contact: { id: string } };
  const activities = async () =>
    Number((await rt.db.query(sql`SELECT count(*) AS n FROM activities WHERE shop_id = ${shop.shopId} AND id = ${activityId}`))[0].n);
  await waitFor(async () => (await activities()) === 1, { message: 'the activity projected' });

  // Hold the contact's key row as a projector's batch would: the job's first statement waits for it.
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let holding!: () => void;
  const held = new Promise<void>((r) => (holding = r));
  const lock = rt.db.tx(async (tx) => {
    await tx.query(sql`SELECT 1 FROM contact_keys WHERE shop_id = ${shop.shopId} AND contact_id = ${contact.id} FOR KEY SHARE`);
    holding();
    await released;
  });
  await held;

  const port = await freePort();
  child = startQueryApi(port);
  const base = `http://127.0.0.1:${port}/v2026-04`;
  await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => null))?.status === 200, {
    timeoutMs: 60_000,
    message: 'query-api up',
  });
  const job = (await (
    await fetch(`${base}/data-privacy/deletion-jobs/`, { method: 'POST', headers: shop.headers, body: JSON.stringify({ email }) })
  ).json()) as {
    id: string;
  };
  const status = async () =>
    ((await (await fetch(`${base}/data-privacy/deletion-jobs/${job.id}/`, { headers: shop.headers })).json()) as { status: string }).status;
  // Running, and its transaction waiting for the lock this test holds.
  await waitFor(async () => (await status()) === 'running', { message: 'the job running' });
  await waitFor(
    async () =>
      (
        await rt.db.query(
          sql`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%DELETE FROM contact_keys%'`,
        )
      ).length === 1,
    { message: "the job's transaction waiting inside the erasure" },
  );
  child.kill('SIGKILL');
  expect((await exitOf(child, { timeoutMs: 30_000 })).signal).toBe('SIGKILL');
  release();
  await lock;
  // Nothing of it committed: still running, the person still there.
  expect((await rt.db.query(sql`SELECT status FROM erasure_jobs WHERE id = ${job.id}`))[0].status).toBe('running');
  expect(await activities()).toBe(1);

  child = startQueryApi(port);
  await waitFor(async () => (await fetch(`${base}/data-privacy/deletion-jobs/${job.id}/`, { headers: shop.headers }).catch(() => null))?.status === 200, {
    timeoutMs: 60_000,
    message: 'query-api up again',
  });
  await waitFor(async () => (await status()) === 'completed', { timeoutMs: 30_000, message: 'the job completed after the restart' });
  const done = (await (await fetch(`${base}/data-privacy/deletion-jobs/${job.id}/`, { headers: shop.headers })).json()) as Record<string, unknown>;
  expect(done).toMatchObject({ status: 'completed', contacts_erased: 1, error: null });
  expect((await rt.db.query(sql`SELECT attempts FROM erasure_jobs WHERE id = ${job.id}`))[0].attempts).toBe(2);
  expect(await activities()).toBe(0);
  const erasures = await readTopic(rt, rt.topics.erasures, (rs) => rs.some((r) => json(r).job_id === job.id));
  expect(erasures.filter((r) => json(r).job_id === job.id).map((r) => json(r).contact_id)).toEqual([contact.id]);
}, 240_000);
