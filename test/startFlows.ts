import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { expect } from 'vitest';
import { waitFor } from '@shopstream/harness';
import { createTestDatabase, testInfra, uniquePrefix } from '@shopstream/testkit';
import { repo, spawnShopstream, startBanner, type ShopstreamProcess } from './shopstreamProcess.js';

// What the `pnpm start` specs share (start.e2e, start.pglite.e2e, start.distributed.e2e: three files, so the suite
// runs them side by side). `pnpm start` as a user runs it: a child process, real HTTP, nothing shared with the test
// but the data directory (embedded) or the Kafka broker and Postgres server (distributed).
// What `pnpm start` runs, exactly as package.json has it: node itself on the sources (a supervisor that signals
// only its child gets the drain). Not the tsx CLI: it relays a signal to its child and SIGKILLs the child when
// it does not confirm within 30 ms (a busy start-up). The image's command line, on the built JS and Node 24, is
// test/start.node24.e2e.spec.ts's.
const scripts = JSON.parse(readFileSync(path.join(repo, 'package.json'), 'utf8')).scripts as Record<string, string>;
export const entrypoint = scripts.start.split(' ');
/** What `pnpm cli` runs, as package.json has it: one node process on the sources (the tsx CLI would be two). */
const cli = scripts.cli.split(' ');

export interface Started extends ShopstreamProcess {
  base: string;
}

/**
 * A distributed deployment of a test's own on the shared PostgreSQL server: a new database, topic prefix and consumer
 * groups, three partitions, one shop with a bootstrap API key, flows reloaded every 500 ms, logs at info (the line
 * that says where the consumers run). `kafka`: KAFKA_BROKERS and how to reach them; `extra` overrides any of it.
 */
export async function distributedEnv(kafka: Record<string, string>, extra: Record<string, string> = {}) {
  const shop = randomUUID();
  const key = `e2e-${randomUUID()}`;
  const env = {
    ...kafka,
    DATABASE_URL: await createTestDatabase(testInfra().databaseUrl),
    TOPIC_PREFIX: uniquePrefix(),
    KAFKA_PARTITIONS: '3',
    BOOTSTRAP_API_KEYS: `${key}=${shop}`,
    FLOW_REFRESH_MS: '500',
    CONSUMER_GROUP_PREFIX: `${randomUUID()}.`,
    LOG_LEVEL: 'info',
    ...extra,
  };
  return { shop, key, env };
}

/** Starts the all-in-one process and waits for its banner; the base URL comes from what it printed. */
export async function startShopstream(env: Record<string, string>): Promise<Started> {
  const s = spawnShopstream(entrypoint, { LOG_LEVEL: 'warn', ...env });
  return { ...s, base: await startBanner(s) };
}

export async function stopShopstream(s: Started): Promise<number | null> {
  s.child.kill('SIGTERM');
  const code = await waitFor(() => (s.child.exitCode !== null ? { code: s.child.exitCode } : undefined), { timeoutMs: 30_000, message: 'exit after SIGTERM' });
  return code.code;
}

export function runCli(args: string[], env: Record<string, string>): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(cli[0] === 'node' ? process.execPath : cli[0], [...cli.slice(1), ...args], {
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

export function api(base: string, key: string, shop: string) {
  return async (method: string, p: string, body?: unknown) => {
    const res = await fetch(`${base}/v2026-04${p}`, {
      method,
      headers: { authorization: `Bearer ${key}`, 'x-shop-id': shop, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, body: res.status === 204 ? null : ((await res.json()) as any) };
  };
}

export function conversationLines(shop: string, n: number): { file: string; ids: string[] } {
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
export async function eventsFlowAndTimeline(base: string, call: ReturnType<typeof api>) {
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

export async function exportedIds(call: ReturnType<typeof api>): Promise<string[]> {
  const r = await call('GET', '/conversations/export/?created_at__range=relative:-1d,');
  expect(r.status).toBe(200);
  return r.body.results.map((c: { id: string }) => c.id);
}

/** The export's ids once it holds `count` conversations: imported ones reach it through their projector. */
export function exportedIdsOnceThere(call: ReturnType<typeof api>, count: number): Promise<string[]> {
  return waitFor(
    async () => {
      const got = await exportedIds(call);
      return got.length === count ? got : undefined;
    },
    { timeoutMs: 30_000, message: 'the imported conversations in the export' },
  );
}

/** Pids of PostgreSQL server processes running on a cluster under dir (read from /proc: what ps would show). */
export function postgresProcesses(dir: string): number[] {
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

/** Every thread of `pid` and its descendants (Linux /proc): its name, nice value, and whether it is its process's first. */
export function threadsUnder(pid: number): { comm: string; nice: number; main: boolean }[] {
  const stat = (file: string) => {
    try {
      const text = readFileSync(file, 'utf8');
      const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
      return { comm: text.slice(text.indexOf('(') + 1, text.lastIndexOf(')')), ppid: Number(rest[1]), nice: Number(rest[16]) };
    } catch {
      return null; // a process or thread that ended meanwhile
    }
  };
  const parents = new Map<number, number>();
  for (const p of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    const st = stat(`/proc/${p}/stat`);
    if (st) parents.set(Number(p), st.ppid);
  }
  const under = (p: number): boolean => p === pid || (parents.has(p) && p > 1 && under(parents.get(p)!));
  return [...parents.keys()].filter(under).flatMap((p) => {
    let tids: string[] = [];
    try {
      tids = readdirSync(`/proc/${p}/task`);
    } catch {
      // ended meanwhile
    }
    return tids.flatMap((tid) => {
      const st = stat(`/proc/${p}/task/${tid}/stat`);
      return st ? [{ comm: st.comm, nice: st.nice, main: Number(tid) === p }] : [];
    });
  });
}
