import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { Queryable } from './db.js';

/** A value COPY's text format can carry: null is SQL NULL; objects are written as JSON. */
export type CopyValue = string | number | boolean | null | undefined;

/**
 * The pg client under a transaction of connectPostgres (an @databases/pg Transaction keeps its driver, whose
 * client is the session the transaction runs on), or undefined for anything else (PGlite, a pool).
 */
function clientOf(tx: Queryable): pg.Client | undefined {
  const client = (tx as { _driver?: { client?: unknown } })._driver?.client;
  return client && typeof (client as pg.Client).query === 'function' ? (client as pg.Client) : undefined;
}

/** Whether copyRows can write through this transaction (PostgreSQL over a pg client; not PGlite). */
export const canCopy = (tx: Queryable): boolean => clientOf(tx) !== undefined;

// COPY text format: backslash, newline, carriage return and tab are escaped; \N is NULL.
const SPECIAL = /[\\\n\r\t]/;
const SPECIAL_G = /[\\\n\r\t]/g;
const ESCAPES: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' };
function field(v: CopyValue): string {
  if (v === null || v === undefined) return '\\N';
  if (typeof v !== 'string') return String(v);
  return SPECIAL.test(v) ? v.replace(SPECIAL_G, (c) => ESCAPES[c]) : v;
}

/** Rows of COPY text per chunk written to the socket (about 64 KiB of text per write at ~600 bytes a row). */
const ROWS_PER_CHUNK = 100;

/**
 * `COPY table (columns) FROM STDIN` of rows in the caller's transaction: one statement, no parameters, no
 * per-value array escaping; PostgreSQL parses each row once. Every row has one value per column, in order.
 * Throws as an INSERT would (constraint violations abort the transaction: use a savepoint to recover).
 * Returns the number of rows the server reports copied.
 */
export async function copyRows(tx: Queryable, table: string, columns: readonly string[], rows: readonly (readonly CopyValue[])[]): Promise<number> {
  const client = clientOf(tx);
  if (!client) throw new Error('copyRows needs a PostgreSQL transaction of connectPostgres');
  if (rows.length === 0) return 0;
  const ident = (s: string) => `"${s.replaceAll('"', '""')}"`;
  const stream = client.query(copyFrom(`COPY ${ident(table)} (${columns.map(ident).join(', ')}) FROM STDIN`));
  let i = 0;
  const source = async function* () {
    while (i < rows.length) {
      let chunk = '';
      for (const end = Math.min(rows.length, i + ROWS_PER_CHUNK); i < end; i++) {
        const r = rows[i];
        let line = field(r[0]);
        for (let c = 1; c < r.length; c++) line += '\t' + field(r[c]);
        chunk += line + '\n';
      }
      yield chunk;
    }
  };
  await pipeline(source, stream as unknown as Writable);
  return Number((stream as unknown as { rowCount?: number }).rowCount ?? rows.length);
}
