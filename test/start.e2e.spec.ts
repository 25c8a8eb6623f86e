import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase, testInfra, uniquePrefix } from '@shopstream/testkit';
import { exitOf, waitFor } from '@shopstream/harness';
import { killShopstreams, repo, spawnShopstream, startBanner, type ShopstreamProcess } from './shopstreamProcess.js';

// `pnpm start` as a user runs it: a child process, real HTTP, nothing shared with the test but the
// data directory (embedded) or the Kafka broker and Postgres server (distributed).
const tsx = path.join(repo, 'node_modules/.bin/tsx');
// What `pnpm start` runs, exactly as package.json has it: node itself on the sources (a supervisor that signals
// only its child gets the drain). Not the tsx CLI: it relays a signal to its child and SIGKILLs the child when
// it does not confirm within 30 ms (a busy start-up). The image's command line, on the built JS and Node 24, is
// test/start.node24.e2e.spec.ts's.
const entrypoint = (JSON.parse(readFileSync(path.join(repo, 'package.json'), 'utf8')).scripts.start as string).split(' ');

afterAll(killShopstreams);

interface Started extends ShopstreamProcess {
  base: string;
}

/** Starts the all-in-one process and waits for its banner; the base URL comes from what it printed. */
async function startShopstream(env: Record<string, string>): Promise<Started> {
  const s = spawnShopstream(entrypoint, { LOG_LEVEL: 'warn', ...env });
  return { ...s, base: await startBanner(s) };
}

async function stopShopstream(s: Started): Promise<number | null> {
  s.child.kill('SIGTERM');
  const code = await waitFor(() => (s.child.exitCode !== null ? { code: s.child.exitCode } : undefined), { timeoutMs: 30_000, message: 'exit after SIGTERM' });
  return code.code;
}

function runCli(args: string[], env: Record<string, string>): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(tsx, ['--conditions=@shopstream/source', 'services/cli/src/main.ts', ...args], {
      cwd: repo,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', LOG_LEVEL: 'warn', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('exit', (code) => resolve({ code, out }));
  });
}

function api(base: string, key: string, shop: string) {
  return async (method: string, p: string, body?: unknown) => {
    const res = await fetch(`${base}/v2026-04${p}`, {
      method,
      headers: { authorization: `Bearer ${key}`, 'x-shop-id': shop, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, body: res.status === 204 ? null : ((await res.json()) as any) };
  };
}

function conversationLines(shop: string, n: number): { file: string; ids: string[] } {
  const ids = Array.from({ length: n }, () => randomUUID());
  const lines: string[] = [];
  ids.forEach((id, i) => {
    const created = new Date(Date.now() - (n - i) * 60_000).toISOString();
    lines.push(
      JSON.stringify({
        type: 'conversation.upserted',
        shop_id: shop,
        conversation: {
          id,
          agent_id: null,
          contact_id: null,
          user_id: null,
          created_at: created,
          updated_at: created,
          flags: [],
          tags: ['e2e'],
          intent: {},
          topic: {},
          type: 'email',
        },
      }),
      JSON.stringify({ type: 'message.created', shop_id: shop, conversation_id: id, message: { id: randomUUID(), created_at: created, text: `hello ${i}` } }),
    );
  });
  const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-import-'));
  const file = path.join(dir, 'conversations.jsonl');
  writeFileSync(file, lines.join('\n') + '\n');
  return { file, ids };
}

/** Event → Activity → timeline; a flow → its trigger. The part both modes share. */
async function eventsFlowAndTimeline(base: string, call: ReturnType<typeof api>) {
  const flow = await call('POST', '/flows/', {
    name: 'Big orders',
    trigger: { metric_name: 'placed_order', property_conditions: [{ field: 'total', op: 'gte', value: 100 }], contact_conditions: [] },
  });
  expect(flow.status).toBe(201);
  // The matcher reloads flows every FLOW_REFRESH_MS; its gauge says when this one is in its index.
  await waitFor(
    async () => {
      const text = await (await fetch(`${base}/metrics`)).text();
      return Number(/^shopstream_flow_matcher_active_flows (\d+)/m.exec(text)?.[1] ?? 0) >= 1;
    },
    { timeoutMs: 60_000, message: 'the flow in the matcher index' },
  );
  const email = `e2e-${randomUUID()}@example.com`;
  const ev = await call('POST', '/events/', {
    name: 'Placed order',
    metric: { metric_name: 'placed_order', value: 150, additional_properties: { total: 150 } },
    contact: { email },
  });
  expect(ev.status).toBe(202);
  expect(ev.body.contact.email).toBe(email);
  const activity = await waitFor(
    async () => {
      const r = await call('GET', `/activities/${ev.body.activity_id}/`);
      return r.status === 200 ? r.body : undefined;
    },
    { timeoutMs: 30_000, message: 'the activity' },
  );
  expect(activity).toMatchObject({ id: ev.body.activity_id, name: 'Placed order', contact: { id: ev.body.contact.id, email } });
  const timeline = await call('GET', `/contacts/${ev.body.contact.id}/timeline/`);
  expect(timeline.status).toBe(200);
  expect(timeline.body.results.map((a: { id: string }) => a.id)).toEqual([ev.body.activity_id]);
  const triggers = await waitFor(
    async () => {
      const r = await call('GET', `/flows/${flow.body.id}/triggers/`);
      return r.body.results?.length > 0 ? r.body.results : undefined;
    },
    { timeoutMs: 30_000, message: 'the flow trigger' },
  );
  expect(triggers).toHaveLength(1);
  expect(triggers[0]).toMatchObject({
    flow_id: flow.body.id,
    activity_id: ev.body.activity_id,
    metric_event_id: ev.body.activity_id,
    contact_id: ev.body.contact.id,
  });
  return { activityId: ev.body.activity_id as string, contactId: ev.body.contact.id as string };
}

async function exportedIds(call: ReturnType<typeof api>): Promise<string[]> {
  const r = await call('GET', '/conversations/export/?created_at__range=relative:-1d,');
  expect(r.status).toBe(200);
  return r.body.results.map((c: { id: string }) => c.id);
}

/** The export's ids once it holds `count` conversations: imported ones reach it through their projector. */
function exportedIdsOnceThere(call: ReturnType<typeof api>, count: number): Promise<string[]> {
  return waitFor(
    async () => {
      const got = await exportedIds(call);
      return got.length === count ? got : undefined;
    },
    { timeoutMs: 30_000, message: 'the imported conversations in the export' },
  );
}

/** Pids of PostgreSQL server processes running on a cluster under dir (read from /proc: what ps would show). */
function postgresProcesses(dir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (path.basename(cmd[0] ?? '') === 'postgres' && cmd.some((a) => a.startsWith(dir))) pids.push(Number(entry));
    } catch {
      /* gone meanwhile */
    }
  }
  return pids;
}

describe('pnpm start, embedded (nothing but Node)', () => {
  it('prints a key that records events, triggers flows, exports imported conversations, and keeps it all over a restart', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-embedded-'));
    // As root, PostgreSQL runs as another OS user, who must be able to enter the directory (mkdtemp's is private).
    chmodSync(dir, 0o755);
    const env = { DATA_DIR: path.join(dir, '.data'), FLOW_REFRESH_MS: '500' };
    try {
      let s = await startShopstream(env);
      expect(s.output()).toMatch(/embedded mode, data in \S+, PostgreSQL/);
      const key = /API key: +(\S+)/.exec(s.output())![1];
      const shop = /Shop id: +(\S+)/.exec(s.output())![1];
      let call = api(s.base, key, shop);
      const { activityId, contactId } = await eventsFlowAndTimeline(s.base, call);

      // CLI commands work while the server runs, against its data: they attach to its PostgreSQL.
      const { file, ids } = conversationLines(shop, 3);
      const imported = await runCli(['conversations', 'import', file], env);
      expect({ code: imported.code, out: imported.out }).toMatchObject({ code: 0 });
      expect(await exportedIdsOnceThere(call, ids.length)).toEqual(ids);
      const created = await runCli(['api-keys', 'create', '--shop', shop, '--name', 'second'], env);
      expect(created.code).toBe(0);
      const secondKey = /ssk_\S+/.exec(created.out)![0];
      expect((await api(s.base, secondKey, shop)('GET', `/activities/${activityId}/`)).status).toBe(200);
      const rebuilt = await runCli(['projections', 'rebuild', 'activity-projector', '--yes'], env);
      expect({ code: rebuilt.code, out: rebuilt.out }).toMatchObject({
        code: 0,
        out: expect.stringMatching(/Rebuilt activity-projector: \d+ records applied/),
      });
      expect((await call('GET', `/activities/${activityId}/`)).status).toBe(200);

      // One server per data directory.
      const second = spawnShopstream(entrypoint, { LOG_LEVEL: 'warn', ...env });
      const secondCode = await new Promise<number | null>((resolve) => second.child.on('exit', resolve));
      expect(secondCode).not.toBe(0);
      expect(second.output()).toMatch(/held by process \d+, a running Shopstream server/);

      expect(await stopShopstream(s)).toBe(0);
      expect(postgresProcesses(env.DATA_DIR)).toEqual([]);
      s = await startShopstream(env);
      expect(/API key: +(\S+)/.exec(s.output())![1]).toBe(key);
      call = api(s.base, key, shop);
      // Still there after the restart.
      expect((await call('GET', `/activities/${activityId}/`)).status).toBe(200);
      expect((await call('GET', `/contacts/${contactId}/timeline/`)).body.results).toHaveLength(1);
      expect(await exportedIds(call)).toEqual(ids);

      // kill -9 of the service: every accepted event survives, and the next start adopts the PostgreSQL left
      // running (no second server, none left over once it stops).
      const accepted: string[] = [];
      for (let i = 0; i < 20; i++) {
        const r = await call('POST', '/events/', { name: `Viewed ${i}`, metric: { metric_name: 'viewed', value: i }, remote_id: `kill-${i}` });
        expect(r.status).toBe(202);
        accepted.push(r.body.activity_id);
      }
      s.child.kill('SIGKILL');
      await waitFor(() => s.child.exitCode !== null || s.child.signalCode !== null, { timeoutMs: 60_000, message: 'the killed process' });
      const orphans = postgresProcesses(env.DATA_DIR);
      expect(orphans.length).toBeGreaterThan(0);
      s = await startShopstream(env);
      expect(s.output()).not.toMatch(/error/i);
      call = api(s.base, key, shop);
      for (const id of accepted) {
        await waitFor(async () => (await call('GET', `/activities/${id}/`)).status === 200, { timeoutMs: 30_000, message: `activity ${id}` });
      }
      expect(postgresProcesses(env.DATA_DIR).sort()).toEqual(orphans.sort());
      expect(await stopShopstream(s)).toBe(0);
      expect(postgresProcesses(env.DATA_DIR)).toEqual([]);
    } finally {
      for (const pid of postgresProcesses(dir)) process.kill(pid, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);

  it('on PGlite (EMBEDDED_DB=pglite), refuses CLI commands while the server holds the data directory, and takes them once it stopped', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-pglite-'));
    const env = { DATA_DIR: path.join(dir, '.data'), EMBEDDED_DB: 'pglite', FLOW_REFRESH_MS: '500' };
    try {
      let s = await startShopstream(env);
      const key = /API key: +(\S+)/.exec(s.output())![1];
      const shop = /Shop id: +(\S+)/.exec(s.output())![1];
      let call = api(s.base, key, shop);
      const { activityId } = await eventsFlowAndTimeline(s.base, call);

      const { file, ids } = conversationLines(shop, 3);
      const refused = await runCli(['conversations', 'import', file], env);
      expect(refused.code).not.toBe(0);
      expect(refused.out).toMatch(/held by process \d+/);
      const busy = await runCli(['projections', 'rebuild', 'activity-projector', '--yes'], env);
      expect(busy.code).toBe(2);
      expect(busy.out).toMatch(/held by process \d+/);

      expect(await stopShopstream(s)).toBe(0);
      const imported = await runCli(['conversations', 'import', file], env);
      expect({ code: imported.code, out: imported.out }).toMatchObject({ code: 0 });
      const rebuilt = await runCli(['projections', 'rebuild', 'activity-projector', '--yes'], env);
      expect(rebuilt.code).toBe(0);
      s = await startShopstream(env);
      call = api(s.base, key, shop);
      expect(await exportedIdsOnceThere(call, ids.length)).toEqual(ids);
      expect((await call('GET', `/activities/${activityId}/`)).status).toBe(200);
      expect(await stopShopstream(s)).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);
});

describe('a signal during start-up', () => {
  it('is held until the service is up, then it stops drained and exits 0 (it used to kill the process mid-start)', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-early-signal-'));
    const dataDir = path.join(dir, '.data');
    try {
      const { child, output } = spawnShopstream(entrypoint, { LOG_LEVEL: 'info', DATA_DIR: dataDir });
      // The data directory's lock is taken while the runtime opens: start-up is under way, handlers installed.
      await waitFor(() => existsSync(path.join(dataDir, 'shopstream.lock')) || undefined, {
        timeoutMs: 60_000,
        intervalMs: 20,
        message: 'the data directory lock',
      });
      child.kill('SIGTERM');
      const code = await exitOf(child, { timeoutMs: 60_000, message: 'exit after SIGTERM' });
      expect({ ...code, out: output().slice(-2000) }).toMatchObject({ code: 0, signal: null });
      expect(output()).toContain('SIGTERM during start-up');
      expect(output()).toContain('"msg":"stopped"');
      expect(existsSync(path.join(dataDir, 'shopstream.lock'))).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe('pnpm start, distributed (KAFKA_BROKERS and DATABASE_URL set)', () => {
  it('runs the same flow on Kafka and PostgreSQL', async () => {
    const { kafkaBrokers, databaseUrl } = testInfra();
    const shop = randomUUID();
    const key = `e2e-${randomUUID()}`;
    const env = {
      KAFKA_BROKERS: kafkaBrokers.join(','),
      DATABASE_URL: await createTestDatabase(databaseUrl),
      TOPIC_PREFIX: uniquePrefix(),
      KAFKA_PARTITIONS: '3',
      BOOTSTRAP_API_KEYS: `${key}=${shop}`,
      FLOW_REFRESH_MS: '500',
      CONSUMER_GROUP_PREFIX: `${randomUUID()}.`,
    };
    // Every service, as the image runs with no command given: stopped with SIGTERM below.
    const s = await startShopstream(env);
    expect(s.output()).toContain('distributed mode');
    expect(s.output()).not.toContain('API key:');
    const call = api(s.base, key, shop);
    await eventsFlowAndTimeline(s.base, call);
    // On a server the CLI works beside the running services.
    const { file, ids } = conversationLines(shop, 3);
    const imported = await runCli(['conversations', 'import', file], env);
    expect(imported.code).toBe(0);
    expect(await exportedIdsOnceThere(call, ids.length)).toEqual(ids);
    expect(await stopShopstream(s)).toBe(0);
  }, 300_000);
});
