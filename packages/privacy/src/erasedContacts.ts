import type { Queryable } from '@shopstream/db';
import { contactStates, type ContactRef, type KeyCache } from './dataKeys.js';

/**
 * Items less those of erased contacts, read in the caller's transaction (contactStates: an erasure in flight is
 * waited for). For records no data key protects, such as metric events on `metrics`, which carry their contact
 * in plaintext until that topic's retention ends.
 */
export async function withoutErasedContacts<T>(tx: Queryable, cache: KeyCache, items: T[], contactOf: (t: T) => ContactRef | null): Promise<T[]> {
  const refs = items.flatMap((t) => contactOf(t) ?? []);
  if (refs.length === 0) return items;
  const states = await contactStates(tx, cache, refs);
  return items.filter((t) => {
    const c = contactOf(t);
    return !c || !states.erased(c.shop_id, c.contact_id);
  });
}
