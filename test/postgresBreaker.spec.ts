import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { connectPostgres, DatabaseUnavailableError, openEmbeddedPostgres, runningServer, sql, type Db } from '@shopstream/db';
import { waitFor } from '@shopstream/harness';

/**
 * connectPostgres's circuit breaker: once the server is gone, queries fail with DatabaseUnavailableError
 * without entering the pool (whose connection attempts take seconds each), and the same Db serves again by
 * itself once the server is back: nobody has to reopen it. A PostgreSQL of the test's own, stopped and started.
 */
const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-pg-breaker-'));
chmodSync(dir, 0o755); // as root, the server runs as another OS user, who must be able to enter it
const dataDir = path.join(dir, 'data');
let owner: Db | undefined;
let db: Db | undefined;
afterAll(async () => {
  await db?.close().catch(() => {});
  await owner?.close().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
});

it('opens on an outage (every query refused as unavailable, none queued) and closes by itself when the server is back', async () => {
  owner = await openEmbeddedPostgres(dataDir, { poolSize: 1 });
  const { port } = runningServer(dataDir)!;
  db = connectPostgres({ url: `postgres://postgres@127.0.0.1:${port}/shopstream`, poolSize: 2 });
  expect((await db.query(sql`SELECT 1 AS one`))[0].one).toBe(1);

  await owner.close(); // pg_ctl stop
  owner = undefined;
  // The first query may learn of the outage itself (a connection refused) or find the breaker already open
  // (the pooled connection's error); either way it is refused as unavailable, and so is every one after it.
  const first = await db.query(sql`SELECT 1`).then(() => 'answered', (e: unknown) => e);
  expect(first).not.toBe('answered');
  // Still refused before the pool well after that first failure: the breaker stays open until its probe
  // connects, not for a fixed window after which requests would queue behind the pool's attempts again.
  await new Promise((r) => setTimeout(r, 1_500));
  const refusals = await Promise.allSettled(Array.from({ length: 50 }, () => db!.query(sql`SELECT 1`)));
  for (const r of refusals) {
    expect(r.status).toBe('rejected');
    // The breaker's own error: refused before the pool, not a connection attempt that failed.
    expect((r as PromiseRejectedResult).reason).toBeInstanceOf(DatabaseUnavailableError);
  }

  owner = await openEmbeddedPostgres(dataDir, { poolSize: 1, port });
  const one = await waitFor(async () => (await db!.query(sql`SELECT 1 AS one`))[0].one, { timeoutMs: 30_000, message: 'the same Db answering again' });
  expect(one).toBe(1);
}, 120_000);
