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

it('stays closed on a busy pool: a wait for a connection that runs out while the server answers others waits again', async () => {
  owner = await pg.start();
  // One connection, 60 queries of 50 ms each at once: the later ones wait seconds for it, several times the pool's
  // 1 s queue timeout, while the server answers the ones ahead of them all along (a 50 ms query is answered well
  // within each second even on a loaded machine).
  const busy = connectPostgres({ url: pg.url, poolSize: 1, queueTimeoutMs: 1_000, busyWaitMs: 60_000 });
  try {
    const results = await Promise.allSettled(Array.from({ length: 60 }, (_, i) => busy.query(sql`SELECT ${i}::int AS i, pg_sleep(0.05)`)));
    const refused = results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason));
    expect(refused).toEqual([]);
    expect(results.map((r) => (r as PromiseFulfilledResult<{ i: number }[]>).value[0].i)).toEqual(Array.from({ length: 60 }, (_, i) => i));
    // Nothing opened the breaker: the next query is answered.
    expect((await busy.query(sql`SELECT 1 AS one`))[0].one).toBe(1);
  } finally {
    await busy.close();
  }

  // The same pool with a wait cap: a query still without a connection once the cap is spent is refused as
  // unavailable (answered 503), named busy, not unreachable.
  const capped = connectPostgres({ url: pg.url, poolSize: 1, queueTimeoutMs: 1_000, busyWaitMs: 1_500 });
  try {
    const results = await Promise.allSettled(Array.from({ length: 80 }, () => capped.query(sql`SELECT pg_sleep(0.05)`)));
    const refused = results.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason as Error);
    expect(refused.length).toBeGreaterThan(0);
    for (const e of refused) {
      expect(e).toBeInstanceOf(DatabaseUnavailableError);
      expect(e.message).toMatch(/is busy: no pooled connection free within/);
    }
    expect((await capped.query(sql`SELECT 1 AS one`))[0].one).toBe(1);
  } finally {
    await capped.close();
  }
}, 120_000);

it('opens on an outage (every query refused as unavailable, none queued) and closes by itself when the server is back', async () => {
  owner ??= await pg.start();
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
