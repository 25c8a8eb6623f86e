import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { queryRow, sql, type Queryable } from '@shopstream/db';
import type { QueryContext } from './index.js';

/**
 * The HMAC key of every cursor query-api signs (the export's and the keyset lists'): CURSOR_SECRET when set,
 * else one made once and kept in the database, so every replica (and every restart) signs and accepts the
 * same cursors without configuration. The row keeps its first name, `export_cursor`, so export cursors
 * already handed out stay valid.
 */
export async function readCursorSecret(db: Queryable, configured: string | undefined): Promise<string> {
  if (configured) return configured;
  await db.query(
    sql`INSERT INTO service_secrets (name, value) VALUES ('export_cursor', ${randomBytes(32).toString('base64url')}) ON CONFLICT (name) DO NOTHING`,
  );
  const secret = await queryRow(db, sql`SELECT value FROM service_secrets WHERE name = 'export_cursor'`, (r) => z.string().parse(r.value));
  return secret!;
}

const secrets = new WeakMap<QueryContext, Promise<string>>();

/** {@link readCursorSecret} for this runtime, read once and shared by all its routes; a failed read is tried again by the next request. */
export function cursorSecret(rt: QueryContext): Promise<string> {
  let secret = secrets.get(rt);
  if (!secret) {
    const read = readCursorSecret(rt.db, rt.config.CURSOR_SECRET);
    read.catch(() => {
      if (secrets.get(rt) === read) secrets.delete(rt);
    });
    secrets.set(rt, read);
    secret = read;
  }
  return secret;
}
