import { hash } from 'node:crypto';
import { v7 as uuidv7 } from 'uuid';
import type { EventInput } from '@shopstream/contracts';

/**
 * The replay key of an event (DESIGN, "Replays are harmless"): `(remote_platform or "", remote_id)` when
 * remote_id is given, else `(metric_name, deduping_key)` when deduping_key is given, else null.
 * Encoded as JSON with a tag, so the two kinds never collide and no separator can be forged.
 */
export function activityKey(event: Pick<EventInput, 'remote_id' | 'remote_platform' | 'metric'>): string | null {
  if (event.remote_id != null) return JSON.stringify(['remote', event.remote_platform ?? '', event.remote_id]);
  if (event.metric.deduping_key != null) return JSON.stringify(['dedupe', event.metric.metric_name, event.metric.deduping_key]);
  return null;
}

/**
 * A keyed event's activity id is a UUIDv5 of the key in the shop's namespace (the shop id is a uuid),
 * so any replay, in any process, gets the same id without a look-up. An unkeyed event gets a UUIDv7.
 */
export function activityId(shopId: string, key: string | null): string {
  return key === null ? uuidv7() : uuidV5(key, shopId);
}

// The shop's namespace bytes, parsed once per shop rather than once per event as uuid's v5 does.
const namespaces = new Map<string, Buffer>();

/** RFC 9562 UUIDv5, as uuid's v5(name, namespace): SHA-1 of namespace bytes + UTF-8 name, version and variant set. */
function uuidV5(name: string, namespace: string): string {
  let ns = namespaces.get(namespace);
  if (ns === undefined) {
    ns = Buffer.from(namespace.replace(/-/g, ''), 'hex');
    if (ns.length !== 16) throw new TypeError(`Not a uuid: ${namespace}`);
    if (namespaces.size >= 10_000) namespaces.clear();
    namespaces.set(namespace, ns);
  }
  // node:crypto's one-shot hash: no Hash object per event.
  const h = hash('sha1', Buffer.concat([ns, Buffer.from(name, 'utf8')]), 'buffer');
  h[6] = (h[6] & 0x0f) | 0x50;
  h[8] = (h[8] & 0x3f) | 0x80;
  const x = h.toString('hex', 0, 16);
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20, 32)}`;
}
