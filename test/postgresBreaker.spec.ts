import { afterAll, expect, it } from 'vitest';
import { connectPostgres, DatabaseUnavailableError, sql, type Db } from '@shopstream/db';
import { ownTestPostgres, waitFor } from '@shopstream/harness';

/**
 * connectPostgres's circuit breaker: once the server is gone, queries fail with DatabaseUnavailableError
 * without entering the pool (whose connection attempts take seconds each), and the same Db serves again by
 * itself once the server is back: nobody has to reopen it. A PostgreSQL of the test's own, stopped and started.
 */
const pg = ownTestPostgres('pg-breaker');
let owner: Db | undefined;
let db: Db | undefined;
afterAll(async () => {
  await db?.close().catch(() => {});
  await owner?.close().catch(() => {});
  pg.remove();
});

it('opens on an outage (every query refused as unavailable, none queued) and closes by itself when the server is back', async () => {
  owner = await pg.start();
  db = connectPostgres({ url: pg.url, poolSize: 2 });
  expect((await db.query(sql`SELECT 1 AS one`))[0].one).toBe(1);

  await owner.close(); // pg_ctl stop
  owner = undefined;
  // The first query may learn of the outage itself (a connection refused) or find the breaker already open
  // (the pooled connection's error); either way it is refused as unavailable, and so is every one after it.
  const first = await db.query(sql`SELECT 1`).then(
    () => 'answered',
    (e: unknown) => e,
  );
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

  owner = await pg.start();
  const one = await waitFor(async () => (await db!.query(sql`SELECT 1 AS one`))[0].one, { timeoutMs: 30_000, message: 'the same Db answering again' });
  expect(one).toBe(1);
}, 120_000);
