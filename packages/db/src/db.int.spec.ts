import { readdir } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, testInfra } from '@shopstream/testkit';
import { waitFor } from '@shopstream/testkit';
import { connectPostgres, type Db } from './db.js';
import { openPglite } from './pglite.js';
import { migrate, packageMigrations, workspaceServiceMigrations } from './migrate.js';
import { sql } from './db.js';

// The same Db port, the same migrations and the same query results on the embedded PGlite and on a server.
const backends: [string, () => Promise<Db>][] = [
  ['PGlite', () => openPglite(undefined)],
  ['PostgreSQL', async () => connectPostgres({ url: await createTestDatabase(testInfra().databaseUrl), poolSize: 3 })],
];

// Steps by file name, over every owner's folder (packages/<package>/migrations/ and services/<name>/migrations/).
const migrationFiles = async () =>
  [
    ...new Set(
      (await Promise.all([...(await packageMigrations()), ...(await workspaceServiceMigrations())].map((s) => readdir(s.dir))))
        .flat()
        .filter((f) => f.endsWith('.sql')),
    ),
  ].sort();

describe.each(backends)('Db on %s', (name, open) => {
  let db: Db;
  beforeAll(async () => {
    db = await open();
  });
  afterAll(async () => {
    await db?.close();
  });

  it('applies every migration once, in name order', async () => {
    const files = await migrationFiles();
    expect(await migrate(db)).toEqual(files);
    expect(await migrate(db)).toEqual([]);
    const rows = await db.query(sql`SELECT name FROM schema_migrations ORDER BY name`);
    expect(rows.map((r) => r.name)).toEqual(files);
    expect(db.kind).toBe(name === 'PGlite' ? 'pglite' : 'postgres');
    expect(db.description).toBe(name === 'PGlite' ? 'PGlite' : 'PostgreSQL');
  });

  it('commits a transaction that resolves', async () => {
    await db.query(sql`CREATE TABLE t_commit (id integer PRIMARY KEY, note text NOT NULL)`);
    const out = await db.tx(async (tx) => {
      await tx.query(sql`INSERT INTO t_commit (id, note) VALUES (1, 'one'), (2, 'two')`);
      return (await tx.query(sql`SELECT count(*)::int AS n FROM t_commit`))[0].n;
    });
    expect(out).toBe(2);
    expect(await db.query(sql`SELECT id, note FROM t_commit ORDER BY id`)).toEqual([
      { id: 1, note: 'one' },
      { id: 2, note: 'two' },
    ]);
  });

  it('rolls back a transaction that throws, and rethrows its error', async () => {
    await db.query(sql`CREATE TABLE t_rollback (id integer PRIMARY KEY)`);
    const boom = new Error('boom');
    await expect(
      db.tx(async (tx) => {
        await tx.query(sql`INSERT INTO t_rollback (id) VALUES (1)`);
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(await db.query(sql`SELECT id FROM t_rollback`)).toEqual([]);
    // A failed statement aborts the transaction: it must roll back and leave the Db usable.
    await expect(db.tx((tx) => tx.query(sql`INSERT INTO t_rollback (id) VALUES (1), (1)`))).rejects.toMatchObject({ code: '23505' });
    expect(await db.query(sql`SELECT id FROM t_rollback`)).toEqual([]);
  });

  it('returns bigint as a decimal string, timestamptz as Date, bytea as bytes, jsonb parsed', async () => {
    const rows = await db.query(sql`
      SELECT 9007199254740993::bigint AS big, count(*) AS n, '2026-04-01T12:00:00Z'::timestamptz AS at,
             ${Buffer.from([0, 1, 255])}::bytea AS bytes, ${JSON.stringify({ a: [1, 'x'] })}::jsonb AS doc,
             ${'1234567890123'}::bigint AS param
      FROM (VALUES (1), (2)) AS v (x)`);
    expect(rows).toHaveLength(1);
    const r = rows[0];
    expect(r.big).toBe('9007199254740993');
    expect(r.n).toBe('2');
    expect(r.param).toBe('1234567890123');
    expect(r.at).toBeInstanceOf(Date);
    expect((r.at as Date).toISOString()).toBe('2026-04-01T12:00:00.000Z');
    expect(Buffer.isBuffer(r.bytes)).toBe(true);
    expect([...(r.bytes as Buffer)]).toEqual([0, 1, 255]);
    expect(r.doc).toEqual({ a: [1, 'x'] });
    // Without parameters PGlite takes another path (the simple protocol): the same shapes there.
    const plain = await db.query(sql`SELECT 9007199254740993::bigint AS big, '2026-04-01T12:00:00Z'::timestamptz AS at, '\\x00ff'::bytea AS bytes`);
    expect(plain[0].big).toBe('9007199254740993');
    expect((plain[0].at as Date).toISOString()).toBe('2026-04-01T12:00:00.000Z');
    expect(Buffer.isBuffer(plain[0].bytes)).toBe(true);
    expect([...(plain[0].bytes as Buffer)]).toEqual([0, 255]);
  });

  it('delivers a NOTIFY to a listener after the notifying transaction commits, and none after unlisten', async () => {
    const got: string[] = [];
    const unlisten = await db.listen('db_spec_channel', (p) => got.push(p));
    await db.tx(async (tx) => {
      await tx.query(sql`SELECT pg_notify('db_spec_channel', 'in-tx')`);
    });
    await db
      .tx(async (tx) => {
        await tx.query(sql`SELECT pg_notify('db_spec_channel', 'rolled-back')`);
        throw new Error('roll back');
      })
      .catch((e: Error) => expect(e.message).toBe('roll back'));
    await db.query(sql`SELECT pg_notify('db_spec_channel', 'plain')`);
    await waitFor(() => got.length >= 2, { message: 'two notifications' });
    expect(got).toEqual(['in-tx', 'plain']);
    await unlisten();
    await db.query(sql`SELECT pg_notify('db_spec_channel', 'after-unlisten')`);
    // A marker on another channel, listened to after unlisten, shows the earlier NOTIFY had its chance.
    const marker: string[] = [];
    const stop = await db.listen('db_spec_marker', (p) => marker.push(p));
    await db.query(sql`SELECT pg_notify('db_spec_marker', 'm')`);
    await waitFor(() => marker.length === 1, { message: 'marker' });
    await stop();
    expect(got).toEqual(['in-tx', 'plain']);
  });

  it('runs multi-statement text (as migrations hold) and parameterised statements alike', async () => {
    await db.query(sql.__dangerous__rawValue(`CREATE TABLE t_multi (id int); INSERT INTO t_multi VALUES (7); INSERT INTO t_multi VALUES (8);`));
    expect(await db.query(sql`SELECT id FROM t_multi WHERE id > ${7}`)).toEqual([{ id: 8 }]);
  });
});
