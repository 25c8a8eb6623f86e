import { cp, mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, testInfra } from '@shopstream/testkit';
import { connectPostgres, sql, type Db } from './db.js';
import { MigrationChangedError, migrate, packageMigrations, stepChecksum, workspaceServiceMigrations } from './migrate.js';

// Checksums of applied migrations, on a real PostgreSQL server: each case has its own database and its own
// packages folder (owners' folders, each with its migrations/, as packages/), so it can edit, move and add files.
const dbs: Db[] = [];
afterAll(async () => {
  await Promise.all(dbs.map((db) => db.close()));
});

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'migrations-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** An owner's migrations folder in the case's packages folder, as packages/<owner>/migrations/. */
const folder = (owner: string) => path.join(dir, owner, 'migrations');
const write = async (owner: string, name: string, text: string) => {
  await mkdir(folder(owner), { recursive: true });
  await writeFile(path.join(folder(owner), name), text);
};
const freshDb = async () => {
  const db = connectPostgres({ url: await createTestDatabase(testInfra().databaseUrl), poolSize: 2 });
  dbs.push(db);
  return db;
};
const recorded = async (db: Db) =>
  Object.fromEntries(
    ((await db.query(sql`SELECT name, checksum FROM schema_migrations ORDER BY name`)) as { name: string; checksum: string | null }[]).map((r) => [
      r.name,
      r.checksum,
    ]),
  );
const tables = async (db: Db) =>
  (
    (await db.query(sql`SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'm\_%' ORDER BY tablename`)) as { tablename: string }[]
  ).map((r) => r.tablename);

const A_BUS = 'CREATE TABLE m_a (id int PRIMARY KEY);\n';
const A_RUNTIME = 'CREATE TABLE m_a_members (id int PRIMARY KEY);\n';
const B_BUS = 'CREATE TABLE m_b (id int PRIMARY KEY);\n';

describe('migrate: checksums of applied migrations (PostgreSQL)', () => {
  beforeEach(async () => {
    await write('bus', '001_a.sql', A_BUS);
    await write('runtime', '001_a.sql', A_RUNTIME);
    await write('bus', '002_b.sql', B_BUS);
  });

  it("records each applied step's checksum, over all its parts; a second run applies and changes nothing", async () => {
    const db = await freshDb();
    expect(await migrate(db, () => {}, [], dir)).toEqual(['001_a.sql', '002_b.sql']);
    expect(await recorded(db)).toEqual({ '001_a.sql': stepChecksum([A_BUS, A_RUNTIME]), '002_b.sql': stepChecksum([B_BUS]) });
    expect(await migrate(db, () => {}, [], dir)).toEqual([]);
    expect(await tables(db)).toEqual(['m_a', 'm_a_members', 'm_b']);
  });

  it('refuses to run when an applied file changed, naming the file, and applies no pending step', async () => {
    const db = await freshDb();
    await migrate(db, () => {}, [], dir);
    const before = await recorded(db);
    await write('runtime', '001_a.sql', A_RUNTIME.replace('PRIMARY KEY', 'PRIMARY KEY, name text'));
    await write('bus', '003_c.sql', 'CREATE TABLE m_c (id int);\n');

    const err = await migrate(db, () => {}, [], dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(MigrationChangedError);
    expect((err as MigrationChangedError).step).toBe('001_a.sql');
    expect((err as Error).message).toContain(path.join(folder('runtime'), '001_a.sql'));
    expect((err as Error).message).toContain(path.join(folder('bus'), '001_a.sql'));
    expect(await tables(db)).toEqual(['m_a', 'm_a_members', 'm_b']);
    expect(await recorded(db)).toEqual(before);
  });

  it('takes a part moved unchanged to another owner, or rewritten with CRLF line endings, as the same step', async () => {
    const db = await freshDb();
    await migrate(db, () => {}, [], dir);
    await mkdir(folder('http'), { recursive: true });
    await rename(path.join(folder('runtime'), '001_a.sql'), path.join(folder('http'), '001_a.sql'));
    await writeFile(path.join(folder('bus'), '002_b.sql'), B_BUS.replace(/\n/g, '\r\n'));
    expect(await migrate(db, () => {}, [], dir)).toEqual([]);
  });

  it('fills in the checksums of steps applied before checksums were recorded, then guards them', async () => {
    const db = await freshDb();
    // A database as the runner before checksums left it: schema_migrations without the column, 001 applied.
    await db.query(sql`CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
    await db.query(sql.__dangerous__rawValue(A_BUS + A_RUNTIME));
    await db.query(sql`INSERT INTO schema_migrations (name) VALUES ('001_a.sql')`);

    const log: string[] = [];
    expect(await migrate(db, (m) => log.push(m), [], dir)).toEqual(['002_b.sql']);
    expect(log).toEqual(['recorded the checksum of migration 001_a.sql, applied before checksums', 'applied migration 002_b.sql']);
    expect(await recorded(db)).toEqual({ '001_a.sql': stepChecksum([A_BUS, A_RUNTIME]), '002_b.sql': stepChecksum([B_BUS]) });

    await write('bus', '001_a.sql', (await readFile(path.join(folder('bus'), '001_a.sql'), 'utf8')) + '-- edited\n');
    await expect(migrate(db, () => {}, [], dir)).rejects.toThrow(
      /^migration 001_a\.sql was applied to this database and one of its files \(.*\) has changed since\./,
    );
  });
});

describe('migrate: services own their migrations folders (PostgreSQL)', () => {
  it("applies nothing again to a database migrated when every owner's folder was under packages/db/migrations", async () => {
    // The layout before the services' folders moved beside their code: every owner a package's folder (once
    // all under packages/db/migrations/; the packages' own are now beside their code, packages/<name>/migrations/).
    for (const source of [...(await packageMigrations()), ...(await workspaceServiceMigrations())])
      await cp(source.dir, folder(source.owner), { recursive: true });
    const db = await freshDb();
    const applied = await migrate(db, () => {}, [], dir);
    expect(applied.length).toBeGreaterThanOrEqual(14);
    const before = await recorded(db);

    // Now: the packages' folders, and each service's beside its code, as the declarations and the workspace give them.
    expect(await migrate(db)).toEqual([]);
    expect(await recorded(db)).toEqual(before);
  });

  it("refuses a step whose service part is missing from the sources as a changed step (a process must know every service's folder)", async () => {
    const db = await freshDb();
    await migrate(db);
    const withoutIngest = (await workspaceServiceMigrations()).filter((s) => s.owner !== 'ingest-api');
    await expect(migrate(db, () => {}, withoutIngest)).rejects.toThrow(/^migration 001_core\.sql was applied/);
  });
});
