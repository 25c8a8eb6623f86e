import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectPostgres, sql, type Db } from '@shopstream/db';
import { loadEnv } from '@shopstream/config';
import { openRuntime } from '@shopstream/runtime';
import { makeTestCertificates, startLocalPostgres, uniquePrefix, waitFor, type PostgresHandle, type TestCertificates } from '@shopstream/testkit';

/**
 * DATABASE_URL over TLS: a throw-away cluster of the machine's initdb with ssl=on and a certificate signed by a CA
 * made at test time. sslmode and sslrootcert are read as libpq reads them (packages/db postgresTls.ts), for the
 * pool, LISTEN and the outage probe alike.
 */
let pgTls: PostgresHandle;
let certs: TestCertificates;
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'shopstream-pg-tls-'));
  certs = await makeTestCertificates(dir);
  pgTls = await startLocalPostgres({ tls: { certFile: certs.serverCertFile, keyFile: certs.serverKeyFile } });
}, 120_000);
afterAll(async () => {
  await pgTls?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const withParams = (params: Record<string, string>) => `${pgTls.url}?${new URLSearchParams(params).toString()}`;
/** Whether this connection of the pool is encrypted, as the server sees it. */
const encrypted = async (db: Db) => (await db.query(sql`SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`))[0]?.ssl;

async function using<T>(url: string, fn: (db: Db) => Promise<T>): Promise<T> {
  const db = connectPostgres({ url, poolSize: 2 });
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}

describe('PostgreSQL over TLS (DATABASE_URL sslmode)', () => {
  it('verify-full with sslrootcert: encrypted, and LISTEN gets its notifications over it too', async () => {
    await using(withParams({ sslmode: 'verify-full', sslrootcert: certs.caFile }), async (db) => {
      expect(await encrypted(db)).toBe(true);
      const got: string[] = [];
      const stop = await db.listen('tls_spec', (p) => got.push(p));
      await db.query(sql`SELECT pg_notify('tls_spec', 'over tls')`);
      await waitFor(() => (got.length > 0 ? true : null), { message: 'the notification' });
      await stop();
      expect(got).toEqual(['over tls']);
    });
  });

  it('require without sslrootcert: encrypted, the self-signed chain not checked (as libpq)', async () => {
    await using(withParams({ sslmode: 'require' }), async (db) => expect(await encrypted(db)).toBe(true));
  });

  it('disable: plaintext (the server also accepts it here), so the encrypted answers above are not the default', async () => {
    await using(withParams({ sslmode: 'disable' }), async (db) => expect(await encrypted(db)).toBe(false));
  });

  it('verify-full or verify-ca against a CA that did not sign the server: refused, naming the certificate', async () => {
    for (const sslmode of ['verify-full', 'verify-ca', 'require']) {
      const err = await using(withParams({ sslmode, sslrootcert: certs.otherCaFile }), (db) => db.query(sql`SELECT 1`)).then(
        () => null,
        (e: unknown) => e as Error,
      );
      expect({ sslmode, message: err?.message }).toEqual({ sslmode, message: expect.stringMatching(/certificate/i) });
    }
  });

  it('verify-ca needs sslrootcert; an unreadable one is named', () => {
    expect(() => connectPostgres({ url: withParams({ sslmode: 'verify-ca' }) })).toThrow(/sslmode=verify-ca needs sslrootcert/);
    expect(() => connectPostgres({ url: withParams({ sslmode: 'verify-full', sslrootcert: '/nonexistent/ca.pem' }) })).toThrow(
      /sslrootcert=\/nonexistent\/ca.pem cannot be read/,
    );
  });

  it('a Shopstream runtime (migrations, the Postgres-log bus) opens on DATABASE_URL with sslmode=verify-full', async () => {
    const env = loadEnv({
      DATABASE_URL: withParams({ sslmode: 'verify-full', sslrootcert: certs.caFile }),
      TOPIC_PREFIX: uniquePrefix(),
      KAFKA_PARTITIONS: '1',
      LOG_LEVEL: 'silent',
    });
    const rt = await openRuntime(env, 'pg-tls');
    try {
      expect(await encrypted(rt.db)).toBe(true);
      await rt.bus.publish(rt.topics.events, [{ key: 'shop', value: Buffer.from('{}'), headers: {} }]);
      expect(await rt.bus.read(rt.topics.events)).toHaveLength(1);
    } finally {
      await rt.close();
    }
  }, 60_000);
});
