import { v5 as uuidv5, v7 as uuidv7 } from 'uuid';
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
  return key === null ? uuidv7() : uuidv5(key, shopId);
}
