import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectPostgres, sql, type Db } from '@shopstream/db';
import { type Bus } from '@shopstream/bus';
import { rebuildProjection, redriveDeadLetters, RebuildStalledError, type ProjectionDefinition } from '@shopstream/projections';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { activityProjection, startActivityProjector } from '@shopstream/activity-projector';
import { startQueryApi } from '@shopstream/query-api';
import { runCliCaptured } from '@shopstream/cli';
import { cliEnv, createTestShop, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';

/**
 * Issue 22, "operations that fail loudly" and "exactly once by id", for `projections rebuild`: reads never fail
 * while it switches, the new tables have statistics, a rebuild whose consumer is gone gives up and says so, the
 * next rebuild removes what a killed one left, and an event dead-lettered live and applied by a rebuild gets
 * its metric event once.
 */
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const activities = activityProjection as ProjectionDefinition<unknown>;

let rt: Runtime;
let server: TestServer;
let shop: Awaited<ReturnType<typeof createTestShop>>;
const activityIds: string[] = [];
const contactIds = new Set<string>();

const liveGroup = () => `${rt.env.CONSUMER_GROUP_PREFIX}activity-projector`;
const rebuild = (o: { bus?: Bus; db?: Db; deadAfterMs?: number } = {}) =>
  rebuildProjection(activities, {
    bus: o.bus ?? rt.bus,
    db: o.db ?? rt.db,
    logger: rt.logger,
    topics: rt.topics,
    groupPrefix: rt.env.CONSUMER_GROUP_PREFIX,
    deadAfterMs: o.deadAfterMs,
  });
/** `pnpm cli projections <args>` in this process (the killed rebuild below is a child: it must die whole). */
const cli = (...args: string[]) => runCliCaptured(['projections', ...args], cliEnv(rt));

const post = async (p: string, body: unknown, headers = shop.headers) => {
  const res = await fetch(`${server.baseUrl}/v2026-04${p}`, { method: 'POST', headers, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as any };
};

/** Waits until the live activity projector has applied everything the events topic holds and the outbox is relayed. */
async function liveCaughtUp(): Promise<void> {
  await waitFor(
    async () => {
      const ends = await rt.bus.offsets(rt.topics.events);
      const at = await rt.db.query(sql`SELECT partition, next_offset FROM projection_offsets WHERE group_id = ${liveGroup()} AND topic = ${rt.topics.events}`);
      const next = new Map(at.map((r) => [Number(r.partition), String(r.next_offset)]));
      const outbox = await rt.db.query(sql`SELECT 1 FROM outbox LIMIT 1`);
      return ends.every((p) => p.high === '0' || next.get(p.partition) === p.high) && outbox.length === 0;
    },
    { timeoutMs: 90_000, message: 'live activity projector caught up, outbox relayed' },
  );
}

/** Makes one partition's live checkpoint claim records the log does not hold: a rebuild waits for them in vain. */
async function unreachableCheckpoint(): Promise<() => Promise<void>> {
  const [row] = await rt.db.query(sql`
    SELECT partition, next_offset FROM projection_offsets WHERE group_id = ${liveGroup()} AND topic = ${rt.topics.events} ORDER BY partition LIMIT 1`);
  await rt.db.query(sql`
    UPDATE projection_offsets SET next_offset = next_offset + 1000
    WHERE group_id = ${liveGroup()} AND topic = ${rt.topics.events} AND partition = ${row.partition}`);
  return async () => {
    await rt.db.query(sql`
      UPDATE projection_offsets SET next_offset = ${row.next_offset}
      WHERE group_id = ${liveGroup()} AND topic = ${rt.topics.events} AND partition = ${row.partition}`);
  };
}

const leftSchemas = async () =>
  (await rt.db.query(sql`SELECT nspname FROM pg_namespace WHERE nspname LIKE 'rebuild\\_%' OR nspname LIKE 'retired\\_%' ORDER BY 1`)).map((r) => r.nspname);

beforeAll(async () => {
  rt = await startTestRuntime({}, 'rebuild-unattended');
  shop = await createTestShop(rt);
  server = await startTestServer(rt, [await startIngestApi(rt), await startQueryApi(rt), await startActivityProjector(rt)]);
  for (let b = 0; b < 4; b++) {
    const events = Array.from({ length: 100 }, (_, i) => ({
      name: `Viewed ${b}-${i}`,
      metric: { metric_name: 'viewed_product', value: i },
      ...(i % 3 === 0 ? {} : { contact: { email: `reader-${i % 25}@example.com` } }),
    }));
    const res = await post('/events/bulk/', { events });
    expect(res.status).toBe(200);
    for (const r of res.body.results) {
      activityIds.push(r.event.activity_id);
      if (r.event.contact) contactIds.add(r.event.contact.id);
    }
  }
  await liveCaughtUp();
}, 180_000);
afterAll(async () => {
  await server?.stop();
});

describe('projections rebuild, unattended', () => {
  it('gives an event dead-lettered live, then applied by a rebuild, then redriven, exactly one metric event', async () => {
    const other = await createTestShop(rt);
    await rt.db.query(sql`ALTER TABLE activities ADD CONSTRAINT blocked_names CHECK (name NOT LIKE 'BLOCKED%') NOT VALID`);
    const accepted: string[] = [];
    try {
      for (const name of ['A1', 'A2', 'A3', 'A4', 'A5', 'A6', 'A7', 'A8', 'BLOCKED B']) {
        const res = await post('/events/', { name, metric: { metric_name: 'placed_order' } }, other.headers);
        expect(res.status).toBe(202);
        accepted.push(res.body.activity_id);
      }
      await liveCaughtUp();
      expect((await rt.db.query(sql`SELECT count(*)::int AS n FROM activities WHERE shop_id = ${other.shopId}`))[0].n).toBe(8);
    } finally {
      await rt.db.query(sql`ALTER TABLE activities DROP CONSTRAINT IF EXISTS blocked_names`);
    }

    const result = await rebuild();
    const redrive = await redriveDeadLetters(rt.topics.dlq(rt.topics.events), {
      bus: rt.bus,
      db: rt.db,
      logger: rt.logger,
      reasonContains: 'check constraint',
    });
    expect(redrive.redriven).toBe(1);
    await liveCaughtUp();

    expect((await rt.db.query(sql`SELECT count(*)::int AS n FROM activities WHERE shop_id = ${other.shopId}`))[0].n).toBe(9);
    const metricIds = await waitFor(
      async () => {
        const ids = (await rt.bus.read(rt.topics.metrics))
          .map((r) => JSON.parse(r.value.toString('utf8')))
          .filter((m) => m.shop_id === other.shopId)
          .map((m) => m.id as string);
        return ids.length >= 9 && ids;
      },
      { timeoutMs: 30_000, message: 'nine metric events' },
    );
    // One per accepted event, none twice: BLOCKED B's from the rebuild.
    expect([...metricIds].sort()).toEqual([...accepted].sort());
    expect(result.emitted).toBe(1);
  }, 240_000);

  it('never fails a read while rebuilds switch under reads and live writes', async () => {
    let running = true;
    const statuses = new Map<number, number>();
    const contacts = [...contactIds];
    const readers = Array.from({ length: 8 }, (_, r) =>
      (async () => {
        for (let i = r; running; i += 8) {
          const urls = [
            `/contacts/${contacts[i % contacts.length]}/timeline/?limit=10`,
            '/activities/?scope=workspace&limit=10',
            `/activities/${activityIds[i % activityIds.length]}/`,
          ];
          const res = await fetch(`${server.baseUrl}/v2026-04${urls[i % urls.length]}`, { headers: shop.headers });
          await res.arrayBuffer();
          statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        }
      })(),
    );
    const writer = (async () => {
      for (let i = 0; running; i++) {
        const res = await post('/events/', {
          name: `During ${i}`,
          metric: { metric_name: 'viewed_product' },
          contact: { email: `reader-${i % 25}@example.com` },
        });
        expect(res.status).toBe(202);
      }
    })();
    try {
      for (let n = 0; n < 3; n++) await rebuild();
    } finally {
      running = false;
      await Promise.all([...readers, writer]);
    }
    expect(statuses.get(200) ?? 0).toBeGreaterThan(0);
    expect(Object.fromEntries([...statuses].filter(([s]) => s !== 200))).toEqual({});
    await liveCaughtUp();
  }, 300_000);

  it('a timeline read waiting behind a switch holds no lock the switch needs next (the deadlock by hand)', async () => {
    const contact = [...contactIds][0];
    let read: Promise<number> | undefined;
    // The switch's order: activities, then contact_timeline.
    await rt.db.tx(async (tx) => {
      await tx.query(sql`LOCK TABLE activities IN ACCESS EXCLUSIVE MODE`);
      read = fetch(`${server.baseUrl}/v2026-04/contacts/${contact}/timeline/?limit=5`, { headers: shop.headers }).then(async (r) => {
        await r.arrayBuffer();
        return r.status;
      });
      await waitFor(
        async () =>
          (
            await rt.db.query(sql`
              SELECT 1 FROM pg_locks WHERE relation = 'public.activities'::regclass AND mode = 'AccessShareLock' AND NOT granted
                AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
          ).length > 0,
        { timeoutMs: 30_000, message: 'the timeline read waiting for activities' },
      );
      await tx.query(sql`LOCK TABLE contact_timeline IN ACCESS EXCLUSIVE MODE`);
    });
    expect(await read).toBe(200);
  }, 60_000);

  it('analyzes the new generation before the switch', async () => {
    await rebuild();
    const stats = await waitFor(
      async () => {
        const rows = await rt.db.query(sql`
          SELECT s.relname, s.last_analyze, c.reltuples FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
          WHERE s.schemaname = 'public' AND s.relname IN ('activities', 'contact_timeline') ORDER BY 1`);
        return rows.every((r) => r.last_analyze !== null) && rows;
      },
      { timeoutMs: 30_000, message: 'the swapped-in tables analyzed' },
    );
    expect(stats.map((r) => r.relname)).toEqual(['activities', 'contact_timeline']);
    for (const r of stats) expect(Number(r.reltuples)).toBeGreaterThan(0);
  }, 120_000);

  it('gives up, cleaned up, when its consumer is gone', async () => {
    // A consumer that joins and goes away, as one that crashed and that nobody restarts.
    const dying = new Proxy(rt.bus, {
      get(target, prop, receiver) {
        if (prop === 'consume') {
          return async (opts: Parameters<Bus['consume']>[0]) => {
            const sub = await target.consume({
              ...opts,
              handleBatch: async () => {
                throw new Error('the consumer crashed');
              },
            });
            await sub.stop();
            return { stop: async () => {} };
          };
        }
        const v = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const started = Date.now();
    const failed = await rebuild({ bus: dying, deadAfterMs: 3_000 }).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(RebuildStalledError);
    expect((failed as Error).message).toMatch(
      /^The rebuild of activity-projector gave up: its consumer \(group \S+\) has delivered nothing for 3 s while [\d,]+ records remain/,
    );
    // Within its 3 s plus what a busy machine needs to start and stop a consumer.
    expect(Date.now() - started).toBeLessThan(60_000);
    expect(await leftSchemas()).toEqual([]);
    const [row] = await rt.db.query(sql`SELECT status, error FROM projection_rebuilds ORDER BY started_at DESC LIMIT 1`);
    expect(row.status).toBe('failed');
    expect(row.error).toContain('has delivered nothing');
  }, 120_000);

  it('gives up when the database is gone, and the next rebuild cleans up after it', async () => {
    // The rebuild reaches PostgreSQL through a proxy the test closes: connections cut, new ones refused.
    const target = new URL(rt.env.DATABASE_URL!);
    const sockets = new Set<net.Socket>();
    const proxy = net.createServer((client) => {
      const upstream = net.connect(Number(target.port || 5432), target.hostname);
      for (const [a, b] of [
        [client, upstream],
        [upstream, client],
      ]) {
        sockets.add(a);
        a.pipe(b);
        a.on('error', () => b.destroy());
        a.on('close', () => b.destroy());
      }
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const via = new URL(target);
    via.host = `127.0.0.1:${(proxy.address() as net.AddressInfo).port}`;
    const db = connectPostgres({ url: via.toString(), applicationName: 'rebuild-through-proxy' });
    await liveCaughtUp();
    const restore = await unreachableCheckpoint();
    try {
      const rebuilding = rebuild({ db, deadAfterMs: 10_000 }).catch((e: unknown) => e);
      const building = await waitFor(
        async () => {
          const [r] = await rt.db.query(sql`
            SELECT r.id, r.build_schema FROM projection_rebuilds r
            WHERE r.status = 'running' AND EXISTS (SELECT 1 FROM projection_offsets o WHERE o.group_id = r.group_id)`);
          return r as { id: string; build_schema: string } | undefined;
        },
        { timeoutMs: 60_000, message: 'the rebuild applying records' },
      );
      proxy.close();
      for (const sock of sockets) sock.destroy();
      const started = Date.now();
      const failed = await rebuilding;
      expect(failed).toBeInstanceOf(RebuildStalledError);
      expect((failed as Error).message).toMatch(/^The rebuild of activity-projector gave up: the database has not answered for 10 s \(/);
      expect(Date.now() - started).toBeLessThan(60_000);
      // It could not clean up without its database: its row still says running, its schema is there.
      expect(await leftSchemas()).toEqual([building.build_schema]);
      await restore();
      await rt.db.query(sql`UPDATE projection_rebuilds SET heartbeat_at = now() - interval '1 minute' WHERE id = ${building.id}`);
      await rebuild();
      expect(await leftSchemas()).toEqual([]);
      expect((await rt.db.query(sql`SELECT status FROM projection_rebuilds WHERE id = ${building.id}`))[0].status).toBe('abandoned');
    } finally {
      await restore();
      proxy.close();
      await db.close();
    }
  }, 240_000);

  describe('the CLI', () => {
    it('exits 1 with one line naming the cause when its consumer delivers nothing for --give-up-after', async () => {
      await liveCaughtUp();
      const restore = await unreachableCheckpoint();
      try {
        const r = await cli('rebuild', 'activity-projector', '--yes', '--give-up-after', '3');
        expect(r.code).toBe(1);
        expect(r.stderr.trim().split('\n').at(-1)).toMatch(
          /^The rebuild of activity-projector gave up: its consumer \(group \S+\) has delivered nothing for 3 s while 1,?000 records remain/,
        );
        expect(await leftSchemas()).toEqual([]);
      } finally {
        await restore();
      }
      const bad = await cli('rebuild', 'activity-projector', '--yes', '--give-up-after', '0');
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain('--give-up-after takes a number of seconds above 0.');
    }, 240_000);

    it('drops what a killed rebuild left (its schema, checkpoints and row) at the next rebuild', async () => {
      await liveCaughtUp();
      const restore = await unreachableCheckpoint();
      const child = spawn(
        process.execPath,
        [
          '--conditions=@shopstream/source',
          '--import',
          'tsx',
          'services/cli/src/main.ts',
          'projections',
          'rebuild',
          'activity-projector',
          '--yes',
          '--give-up-after',
          '600',
        ],
        { cwd: REPO, env: cliEnv(rt), stdio: 'ignore' },
      );
      const exited = new Promise((r) => child.on('exit', r));
      let dead: { id: string; build_schema: string; group_id: string };
      try {
        dead = await waitFor(
          async () => {
            const [r] = await rt.db.query(sql`
              SELECT r.id, r.build_schema, r.group_id FROM projection_rebuilds r
              WHERE r.status = 'running' AND EXISTS (SELECT 1 FROM projection_offsets o WHERE o.group_id = r.group_id)`);
            return r as typeof dead | undefined;
          },
          { timeoutMs: 120_000, message: 'the rebuild applying records' },
        );
        expect(await leftSchemas()).toEqual([dead.build_schema]);
      } finally {
        child.kill('SIGKILL');
        await exited;
        await restore();
      }
      // And one that switched but was killed before it dropped the old generation.
      await rt.db.query(sql`CREATE SCHEMA retired_activity_projector_0badc0de`);
      await rt.db.query(sql`CREATE TABLE retired_activity_projector_0badc0de.activities (LIKE public.activities INCLUDING ALL)`);
      // Its heartbeat stops; a minute later it counts as dead (the clock here is the database's).
      await rt.db.query(sql`UPDATE projection_rebuilds SET heartbeat_at = now() - interval '1 minute' WHERE id = ${dead.id}`);

      const r = await cli('rebuild', 'activity-projector', '--yes');
      expect(r.code).toBe(0);
      expect(await leftSchemas()).toEqual([]);
      expect(await rt.db.query(sql`SELECT group_id FROM projection_offsets WHERE group_id LIKE '%.rebuild.%'`)).toEqual([]);
      expect((await rt.db.query(sql`SELECT status FROM projection_rebuilds WHERE id = ${dead.id}`))[0].status).toBe('abandoned');
    }, 300_000);
  });
});
