import { createHash } from 'node:crypto';
import { z } from 'zod';
import { cursorCodec, type CursorCodec } from '@shopstream/http';
import type { Runtime } from '@shopstream/runtime';
import { cursorSecret } from '../cursorSecret.js';

const window = z.tuple([z.number().int(), z.number().int()]);

/**
 * What an export cursor pins: the direction, the position (the (created_at, id) key it starts after or
 * before, or (updated_at, id) under an updated_at window; null for the start or end of the results), a
 * fingerprint of the filters as the client wrote them (and of the shop, so of the order too), and the
 * windows they resolved to at the first request.
 */
export const exportCursorSchema = z.object({
  v: z.literal(1),
  d: z.enum(['next', 'prev']),
  k: z.tuple([z.string(), z.uuid()]).nullable(),
  f: z.string(),
  w: z.object({ c: window.optional(), l: window.optional(), u: window.optional() }),
});
export type ExportCursor = z.infer<typeof exportCursorSchema>;

/** A short, stable digest of the canonical filters: a cursor used with other filters no longer matches. */
export function filterFingerprint(canonical: Record<string, unknown>): string {
  const sorted = Object.keys(canonical)
    .sort()
    .map((k) => [k, canonical[k]]);
  return createHash('sha256').update(JSON.stringify(sorted)).digest('base64url').slice(0, 22);
}

/** The export's cursor codec, keyed with query-api's one cursor secret (see {@link cursorSecret}). */
export async function exportCursorCodec(rt: Runtime): Promise<CursorCodec<ExportCursor>> {
  return cursorCodec(await cursorSecret(rt), exportCursorSchema);
}
