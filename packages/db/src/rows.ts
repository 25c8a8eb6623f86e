import type { Queryable, SQLQuery } from './db.js';

/** A row as the driver returns it: column name to value (timestamps as Date, bigints as decimal strings). */
export type Row = Record<string, unknown>;

/**
 * Turns a row into a typed value: a zod schema (anything with `parse`) or a typed mapper. Each store declares
 * one for the rows it reads, so a renamed column or a changed type fails where the row is read, not later.
 */
export type RowDecoder<T> = { parse(row: unknown): T } | ((row: Row) => T);

const decodeWith = <T>(decode: RowDecoder<T>): ((row: Row) => T) => (typeof decode === 'function' ? decode : (row) => decode.parse(row));

/** The rows of a query, each through the decoder. */
export async function queryRows<T>(db: Queryable, query: SQLQuery, decode: RowDecoder<T>): Promise<T[]> {
  const rows: Row[] = await db.query(query);
  return rows.map(decodeWith(decode));
}

/** The first row of a query through the decoder, or null when it returned none. */
export async function queryRow<T>(db: Queryable, query: SQLQuery, decode: RowDecoder<T>): Promise<T | null> {
  const rows: Row[] = await db.query(query);
  return rows.length === 0 ? null : decodeWith(decode)(rows[0]);
}
