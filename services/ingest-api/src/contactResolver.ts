import { createKeyedMicroBatcher } from '@shopstream/bus';
import type { ResolvedContact } from '@shopstream/contracts';
import type { Queryable } from '@shopstream/db';
import { resolveContacts, type ContactQuery, type ResolutionKeys } from './resolveContacts.js';

export interface ContactResolver {
  resolve(shopId: string, queries: ContactQuery[]): Promise<ResolvedContact[]>;
  /** Waits for the resolutions in progress. */
  close(): Promise<void>;
}

interface Pending {
  shopId: string;
  queries: ContactQuery[];
  result?: ResolvedContact[];
  error?: unknown;
}

/**
 * Gathers the contact look-ups of concurrent requests into one resolveContacts call per shop, so under
 * load a few queries serve many requests instead of a few per request (as the Kafka adapter does for sends);
 * shops are batched apart, so one shop's bulk does not delay another's events.
 * Each request gets its own answer or its own error: one shop's failure does not fail another's, and a
 * batch the database refuses is retried request by request, so one bad request does not fail the others.
 */
export function createContactResolver(db: Queryable, opts: { lingerMs: number; maxQueries?: number; keys?: ResolutionKeys }): ContactResolver {
  // A batcher per shop: one shop's large resolution never holds up another shop's (createKeyedMicroBatcher).
  const batcher = createKeyedMicroBatcher<Pending>({
    key: (p) => p.shopId,
    lingerMs: opts.lingerMs,
    maxWeight: opts.maxQueries ?? 1_000,
    weight: (p) => p.queries.length,
    async flush(items) {
      const byShop = new Map<string, Pending[]>();
      for (const p of items) byShop.set(p.shopId, [...(byShop.get(p.shopId) ?? []), p]);
      await Promise.all(
        [...byShop].map(async ([shopId, pending]) => {
          try {
            const all = await resolveContacts(
              db,
              shopId,
              pending.flatMap((p) => p.queries),
              opts.keys,
            );
            let at = 0;
            for (const p of pending) {
              p.result = all.slice(at, at + p.queries.length);
              at += p.queries.length;
            }
          } catch (e) {
            if (pending.length === 1) {
              pending[0].error = e;
              return;
            }
            // Perhaps one request's contacts are what the database refused: each request alone, so that one
            // fails alone and its batch-mates get their answers (if the database is down, each fails fast).
            await Promise.all(
              pending.map(async (p) => {
                try {
                  p.result = await resolveContacts(db, shopId, p.queries, opts.keys);
                } catch (e2) {
                  p.error = e2;
                }
              }),
            );
          }
        }),
      );
    },
  });
  return {
    async resolve(shopId, queries) {
      if (queries.length === 0) return [];
      const p: Pending = { shopId, queries };
      await batcher.add(p);
      if (p.error !== undefined) throw p.error;
      return p.result!;
    },
    close: () => batcher.close(),
  };
}
