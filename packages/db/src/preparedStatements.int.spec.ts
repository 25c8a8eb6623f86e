import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, testInfra } from '@shopstream/testkit';
import { connectPostgres, sql, type Db } from './db.js';
import { MAX_NAMED, MAX_PARAMETERS, PREPARE_AFTER_RUNS, statementNames } from './preparedStatements.js';

// One connection per pool, so every statement of a test meets the same server session and its prepared statements.
describe('prepared statements on PostgreSQL', () => {
  let url: string;
  let db: Db;
  let plain: Db;
  beforeAll(async () => {
    url = await createTestDatabase(testInfra().databaseUrl);
    db = connectPostgres({ url, poolSize: 1, applicationName: 'prepared-on' });
    plain = connectPostgres({ url, poolSize: 1, applicationName: 'prepared-off', preparedStatements: false });
  });
  afterAll(async () => {
    await db?.close();
    await plain?.close();
  });

  /** The session's prepared statements whose text names the marker. */
  const preparedWith = async (on: Db, marker: string) =>
    (
      await on.query(
        sql`SELECT name, statement FROM pg_prepared_statements WHERE statement LIKE ${`%${marker}%`} AND statement NOT LIKE '%pg_prepared_statements%'`,
      )
    ).map((r) => r.name as string);

  it('prepares a statement with parameters once it repeats, and runs it by name after', async () => {
    const run = (n: number) => db.query(sql`SELECT ${n}::int + 1 AS marker_repeat`);
    expect(await run(1)).toEqual([{ marker_repeat: 2 }]);
    expect(await preparedWith(db, 'marker_repeat')).toEqual([]);
    for (let i = 2; i <= PREPARE_AFTER_RUNS + 3; i++) expect(await run(i)).toEqual([{ marker_repeat: i + 1 }]);
    const names = await preparedWith(db, 'marker_repeat');
    expect(names).toHaveLength(1);
    expect(names[0]).toMatch(/^shopstream_\d+$/);
  });

  it('prepares inside transactions too, and nothing without parameters or with DATABASE_PREPARED_STATEMENTS=false', async () => {
    for (let i = 0; i < PREPARE_AFTER_RUNS + 1; i++) {
      await db.tx(async (tx) => {
        await tx.query(sql`SELECT ${i}::int AS marker_tx`);
        await tx.query(sql`SELECT 1 AS marker_no_params`);
      });
      await plain.query(sql`SELECT ${i}::int AS marker_off`);
    }
    expect(await preparedWith(db, 'marker_tx')).toHaveLength(1);
    expect(await preparedWith(db, 'marker_no_params')).toEqual([]);
    expect(await preparedWith(plain, 'marker_off')).toEqual([]);
  });

  it('prepares again under a new name when the statement it prepared returns another shape', async () => {
    await db.query(sql`CREATE TABLE probe_shape (a integer)`);
    await db.query(sql`INSERT INTO probe_shape VALUES (1)`);
    const read = () => db.query(sql`SELECT * FROM probe_shape WHERE a = ${1}`);
    for (let i = 0; i < PREPARE_AFTER_RUNS + 1; i++) expect(await read()).toEqual([{ a: 1 }]);
    const [before] = await preparedWith(db, 'probe_shape WHERE');
    expect(before).toMatch(/^shopstream_\d+$/);
    await db.query(sql`ALTER TABLE probe_shape ADD COLUMN b integer`);
    // The server refuses the statement it prepared for the old shape: once, then it runs under a new name.
    await expect(read()).rejects.toThrow(/cached plan must not change result type/);
    expect(await read()).toEqual([{ a: 1, b: null }]);
    // (@databases/pg closes the connection that failed; another connection of the pool would meet the new name.)
    const after = await preparedWith(db, 'probe_shape WHERE');
    expect(after).toHaveLength(1);
    expect(after[0]).not.toBe(before);
  });
});

describe('statementNames', () => {
  it('names a text with parameters on its PREPARE_AFTER_RUNS-th run, the same name after', () => {
    const names = statementNames();
    const runs = Array.from({ length: PREPARE_AFTER_RUNS + 2 }, () => names.nameFor('SELECT $1', [1]));
    expect(runs.slice(0, PREPARE_AFTER_RUNS - 1)).toEqual(Array(PREPARE_AFTER_RUNS - 1).fill(undefined));
    expect(new Set(runs.slice(PREPARE_AFTER_RUNS - 1)).size).toBe(1);
    expect(runs[PREPARE_AFTER_RUNS - 1]).toMatch(/^shopstream_\d+$/);
    expect(names.nameFor('SELECT 1', [])).toBeUndefined();
    expect(names.nameFor('SELECT 1', [])).toBeUndefined();
  });

  it('names at most MAX_NAMED texts, none with more than MAX_PARAMETERS parameters', () => {
    const names = statementNames();
    for (let i = 0; i < MAX_NAMED + 100; i++) for (let k = 0; k < PREPARE_AFTER_RUNS; k++) names.nameFor(`SELECT $1 + ${i}`, [i]);
    expect(names.named).toBe(MAX_NAMED);
    expect(names.nameFor(`SELECT $1 + ${MAX_NAMED + 50}`, [1])).toBeUndefined();
    expect(names.nameFor('SELECT $1 + 5', [1])).toMatch(/^shopstream_/);
    const wide = statementNames();
    const many = Array.from({ length: MAX_PARAMETERS + 1 }, (_, i) => i);
    for (let k = 0; k < PREPARE_AFTER_RUNS + 2; k++) expect(wide.nameFor('SELECT many', many)).toBeUndefined();
    for (let k = 0; k < PREPARE_AFTER_RUNS; k++) wide.nameFor('SELECT fewer', many.slice(1));
    expect(wide.nameFor('SELECT fewer', many.slice(1))).toMatch(/^shopstream_/);
  });

  it('renames only on a refused cached plan of the name it gave', () => {
    const names = statementNames();
    for (let k = 0; k < PREPARE_AFTER_RUNS; k++) names.nameFor('SELECT $1', [1]);
    const first = names.nameFor('SELECT $1', [1]);
    names.failed('SELECT $1', first, Object.assign(new Error('duplicate key'), { code: '23505' }));
    expect(names.nameFor('SELECT $1', [1])).toBe(first);
    names.failed('SELECT $1', 'shopstream_999', Object.assign(new Error('cached plan must not change result type'), { code: '0A000' }));
    expect(names.nameFor('SELECT $1', [1])).toBe(first);
    names.failed('SELECT $1', first, Object.assign(new Error('cached plan must not change result type'), { code: '0A000' }));
    const second = names.nameFor('SELECT $1', [1]);
    expect(second).not.toBe(first);
    expect(second).toMatch(/^shopstream_\d+$/);
  });
});
