import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { sql, type Db } from '@shopstream/db';
import { cursorCodec, type CursorCodec } from '@shopstream/http';

const window = z.tuple([z.number().int(), z.number().int()]);

/**
 * What an export cursor pins: the direction, the position (the (created_at, id) key it starts after or
 * before, or null for the start or end of the results), a fingerprint of the filters as the client wrote
 * them (and of the shop), and the windows they resolved to at the first request.
 */
export const exportCursorSchema = z.object({
  v: z.literal(1),
  d: z.enum(['next', 'prev']),
  k: z.tuple([z.string(), z.uuid()]).nullable(),
  f: z.string(),
  w: z.object({ c: window.optional(), l: window.optional() }),
});
export type ExportCursor = z.infer<typeof exportCursorSchema>;

/** A short, stable digest of the canonical filters: a cursor used with other filters no longer matches. */
export function filterFingerprint(canonical: Record<string, unknown>): string {
  const sorted = Object.keys(canonical)
    .sort()
    .map((k) => [k, canonical[k]]);
  return createHash('sha256').update(JSON.stringify(sorted)).digest('base64url').slice(0, 22);
}

/**
 * The HMAC key: CURSOR_SECRET when set, else one made once and kept in the database, so every replica
 * (and every restart) signs and accepts the same cursors without configuration.
 */
export async function exportCursorCodec(db: Db, configured: string | undefined): Promise<CursorCodec<ExportCursor>> {
  if (configured) return cursorCodec(configured, exportCursorSchema);
  await db.query(sql`INSERT INTO service_secrets (name, value) VALUES ('export_cursor', ${randomBytes(32).toString('base64url')}) ON CONFLICT (name) DO NOTHING`);
  const rows = await db.query(sql`SELECT value FROM service_secrets WHERE name = 'export_cursor'`);
  return cursorCodec(rows[0].value as string, exportCursorSchema);
}
