import { PGlite, types } from '@electric-sql/pglite';
import { formatQuery, type Db, type Queryable, type Row } from './db.js';
import { lockDataDir } from './dataDirLock.js';
import path from 'node:path';

/**
 * A Db over PGlite, the embedded mode's database. PGlite is one connection, so transactions
 * are serialised here: a query outside a transaction waits for the transaction in progress.
 */
export async function openPglite(dataDir: string | undefined): Promise<Db> {
  // The lock sits beside the database files: PGlite wants a directory of its own.
  const release = dataDir ? lockDataDir(dataDir) : () => {};
  const db = await PGlite.create({
    dataDir: dataDir ? path.join(dataDir, 'pg') : undefined,
    // Same shapes as the server path: bigints as strings (as @databases/pg with bigIntMode 'string').
    // bytea as a Node Buffer, as pg returns it (PGlite's own parser gives a bare Uint8Array).
    parsers: { [types.INT8]: (v: string) => v, [types.BYTEA]: (v: string) => Buffer.from(v.slice(2), 'hex') },
  }).catch((e: unknown) => {
    release();
    throw e;
  });
  let chain: Promise<unknown> = Promise.resolve();
  const serial = <T>(fn: () => Promise<T>): Promise<T> => {
    const run = chain.then(fn, fn);
    chain = run.catch(() => {});
    return run;
  };
  const run = async (q: Parameters<Queryable['query']>[0], via: Pick<PGlite, 'query' | 'exec'>): Promise<Row[]> => {
    const { text, values } = formatQuery(q);
    if (values.length === 0) {
      // Parameterless text may hold several statements (migrations): only the simple protocol takes those.
      const results = await via.exec(text);
      return results[results.length - 1]?.rows ?? [];
    }
    const res = await via.query<Row>(text, values);
    return res.rows;
  };
  return {
    kind: 'pglite',
    description: 'PGlite',
    oneConnection: true,
    query: (q) => serial(() => run(q, db)),
    tx: (fn) => serial(() => db.transaction((t) => fn({ query: (q) => run(q, t as never) }))),
    async listen(channel, onNotify) {
      const unsub = await db.listen(channel, onNotify);
      return async () => unsub();
    },
    close: () => serial(() => db.close()).finally(release),
  };
}
