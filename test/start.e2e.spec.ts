import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase, testInfra, uniquePrefix } from '@shopstream/testkit';
import { waitFor } from '@shopstream/testkit/harness';

// `pnpm start` as a user runs it: a child process, real HTTP, nothing shared with the test but the
// data directory (embedded) or the Kafka broker and Postgres server (distributed).
const repo = path.resolve(import.meta.dirname, '..');
const tsx = path.join(repo, 'node_modules/.bin/tsx');
// What `pnpm start` runs, exactly as package.json has it: node itself on the sources (a supervisor that signals
// only its child gets the drain). Not the tsx CLI: it relays a signal to its child and SIGKILLs the child when
// it does not confirm within 30 ms (a busy start-up). The image's command line, on the built JS and Node 24, is
// test/start.node24.e2e.spec.ts's.
const entrypoint = (JSON.parse(readFileSync(path.join(repo, 'package.json'), 'utf8')).scripts.start as string).split(' ');
const children = new Set<ChildProcess>();

afterAll(() => {
  for (const c of children) c.kill('SIGKILL');
});

interface Started {
  child: ChildProcess;
  base: string;
  output: () => string;
}

/** Starts the all-in-one process and waits for its banner; the base URL comes from what it printed. */
async function startShopstream(env: Record<string, string>, argv = entrypoint): Promise<Started> {
  const [command, ...args] = argv as [string, ...string[]];
  const child = spawn(command, args, {
    cwd: repo,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const base = await waitFor(
    () => {
      if (child.exitCode !== null) throw new Error(`pnpm start exited ${child.exitCode}:\n${out}`);
      return /API: +(http:\/\/\S+)\/v2026-04\//.exec(out)?.[1];
    },
    { timeoutMs: 90_000, message: 'the start banner' },
  );
  return { child, base, output: () => out };
}

async function stopShopstream(s: Started): Promise<number | null> {
  s.child.kill('SIGTERM');
  const code = await waitFor(() => (s.child.exitCode !== null ? { code: s.child.exitCode } : undefined), { timeoutMs: 30_000, message: 'exit after SIGTERM' });
  children.delete(s.child);
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
        conversation: { id, agent_id: null, contact_id: null, user_id: null, created_at: created, updated_at: created, flags: [], tags: ['e2e'], intent: {}, topic: {}, type: 'email' },
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
  await waitFor(async () => {
    const text = await (await fetch(`${base}/metrics`)).text();
    return Number(/^shopstream_flow_matcher_active_flows (\d+)/m.exec(text)?.[1] ?? 0) >= 1;
  }, { timeoutMs: 15_000, message: 'the flow in the matcher index' });
  const email = `e2e-${randomUUID()}@example.com`;
  const ev = await call('POST', '/events/', { name: 'Placed order', metric: { metric_name: 'placed_order', value: 150, additional_properties: { total: 150 } }, contact: { email } });
  expect(ev.status).toBe(202);
  expect(ev.body.contact.email).toBe(email);
  const activity = await waitFor(async () => {
    const r = await call('GET', `/activities/${ev.body.activity_id}/`);
    return r.status === 200 ? r.body : undefined;
  }, { timeoutMs: 30_000, message: 'the activity' });
  expect(activity).toMatchObject({ id: ev.body.activity_id, name: 'Placed order', contact: { id: ev.body.contact.id, email } });
  const timeline = await call('GET', `/contacts/${ev.body.contact.id}/timeline/`);
  expect(timeline.status).toBe(200);
  expect(timeline.body.results.map((a: { id: string }) => a.id)).toEqual([ev.body.activity_id]);
  const triggers = await waitFor(async () => {
    const r = await call('GET', `/flows/${flow.body.id}/triggers/`);
    return r.body.results?.length > 0 ? r.body.results : undefined;
  }, { timeoutMs: 30_000, message: 'the flow trigger' });
  expect(triggers).toHaveLength(1);
  expect(triggers[0]).toMatchObject({ flow_id: flow.body.id, activity_id: ev.body.activity_id, metric_event_id: ev.body.activity_id, contact_id: ev.body.contact.id });
  return { activityId: ev.body.activity_id as string, contactId: ev.body.contact.id as string };
}

async function exportedIds(call: ReturnType<typeof api>): Promise<string[]> {
  const r = await call('GET', '/conversations/export/?created_at__range=relative:-1d,');
  expect(r.status).toBe(200);
  return r.body.results.map((c: { id: string }) => c.id);
}

describe('pnpm start, embedded (nothing but Node)', () => {
  it('prints a key that records events, triggers flows, exports imported conversations, and keeps it all over a restart', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-embedded-'));
    const env = { DATA_DIR: path.join(dir, '.data'), FLOW_REFRESH_MS: '500' };
    try {
      let s = await startShopstream(env);
      const key = /API key: +(\S+)/.exec(s.output())![1];
      const shop = /Shop id: +(\S+)/.exec(s.output())![1];
      let call = api(s.base, key, shop);
      const { activityId, contactId } = await eventsFlowAndTimeline(s.base, call);

      // The embedded server holds the database: the CLI says so, and what to do instead.
      const { file, ids } = conversationLines(shop, 3);
      const refused = await runCli(['conversations', 'import', file], env);
      expect(refused.code).not.toBe(0);
      expect(refused.out).toMatch(/held by process \d+/);

      // A rebuild is refused the same way (exit 2), with nothing changed.
      const busy = await runCli(['projections', 'rebuild', 'activity-projector', '--yes'], env);
      expect(busy.code).toBe(2);
      expect(busy.out).toMatch(/held by process \d+/);

      // The documented route: stop, import (and rebuild), start again.
      expect(await stopShopstream(s)).toBe(0);
      const imported = await runCli(['conversations', 'import', file], env);
      expect({ code: imported.code, out: imported.out }).toMatchObject({ code: 0 });
      const rebuilt = await runCli(['projections', 'rebuild', 'activity-projector', '--yes'], env);
      expect(rebuilt.code).toBe(0);
      expect(rebuilt.out).toMatch(/Rebuilt activity-projector: \d+ records applied/);
      s = await startShopstream(env);
      expect(/API key: +(\S+)/.exec(s.output())![1]).toBe(key);
      call = api(s.base, key, shop);
      const exported = await waitFor(async () => {
        const got = await exportedIds(call);
        return got.length === ids.length ? got : undefined;
      }, { timeoutMs: 30_000, message: 'the imported conversations in the export' });
      expect(exported).toEqual(ids);
      // Still there after the restart.
      expect((await call('GET', `/activities/${activityId}/`)).status).toBe(200);
      expect((await call('GET', `/contacts/${contactId}/timeline/`)).body.results).toHaveLength(1);
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
      const [command, ...args] = entrypoint as [string, ...string[]];
      const child = spawn(command, args, {
        cwd: repo,
        env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', DATA_DIR: dataDir },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.add(child);
      let out = '';
      child.stdout!.on('data', (d) => (out += d));
      child.stderr!.on('data', (d) => (out += d));
      // The data directory's lock is taken while the runtime opens: start-up is under way, handlers installed.
      await waitFor(() => existsSync(path.join(dataDir, 'shopstream.lock')) || undefined, { timeoutMs: 60_000, intervalMs: 20, message: 'the data directory lock' });
      child.kill('SIGTERM');
      const code = await waitFor(() => (child.exitCode !== null || child.signalCode !== null ? { code: child.exitCode, signal: child.signalCode } : undefined), {
        timeoutMs: 60_000,
        message: 'exit after SIGTERM',
      });
      children.delete(child);
      expect({ ...code, out: out.slice(-2000) }).toMatchObject({ code: 0, signal: null });
      expect(out).toContain('SIGTERM during start-up');
      expect(out).toContain('"msg":"stopped"');
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
    const exported = await waitFor(async () => {
      const got = await exportedIds(call);
      return got.length === ids.length ? got : undefined;
    }, { timeoutMs: 30_000, message: 'the imported conversations in the export' });
    expect(exported).toEqual(ids);
    expect(await stopShopstream(s)).toBe(0);
  }, 300_000);
});
