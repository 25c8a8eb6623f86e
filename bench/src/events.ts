import { randomUUID } from 'node:crypto';
import { v5 as uuidv5 } from 'uuid';
import type { EventInput, EventRecord } from '@shopstream/contracts';
import { activityId, activityKey, buildRecord } from '@shopstream/records';

/**
 * Realistic event traffic: a shop's storefront and back office. About half of the events carry a contact
 * (drawn from a pool of returning customers, so most resolve to an existing contact and some create one),
 * a third are keyed by remote_id (every one unique: a replay would not create an Activity), a few use a
 * deduping_key, the rest are unkeyed.
 */
const METRICS = [
  { name: 'Placed order', metric: 'placed_order', value: true },
  { name: 'Viewed product', metric: 'viewed_product', value: false },
  { name: 'Added to cart', metric: 'added_to_cart', value: true },
  { name: 'Started checkout', metric: 'started_checkout', value: true },
  { name: 'Opened email', metric: 'opened_email', value: false },
  { name: 'Fulfilled order', metric: 'fulfilled_order', value: true },
] as const;

const PRODUCTS = ['Linen shirt', 'Canvas tote', 'Espresso beans 1kg', 'Trail shoes', 'Wool beanie', 'Ceramic mug', 'Desk lamp'];

/** Distinct customers per shop that events draw their contact from. */
export const CONTACT_POOL = 20_000;

export interface EventMaker {
  event(): EventInput;
}

/** Contact pool per generator: `contactPool` identities, each known by email, phone or remote_id (or two). */
export function eventMaker(opts: { seed: string; contactPool?: number }): EventMaker {
  const pool = opts.contactPool ?? CONTACT_POOL;
  let n = 0;
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(Math.random() * xs.length)];
  const contact = (): EventInput['contact'] => {
    const i = Math.floor(Math.random() * pool);
    const r = i % 10;
    const email = `customer${i}@example.com`;
    const phone = `+336${String(10_000_000 + i).slice(-8)}`;
    const remote = `cust-${i}`;
    // 60% email, 20% phone, 10% remote_id, 10% email and phone.
    if (r < 6) return { email, ...(i % 3 === 0 ? { name: `Customer ${i}` } : {}) };
    if (r < 8) return { phone };
    if (r < 9) return { remote_id: remote };
    return { email, phone };
  };
  return {
    event() {
      n++;
      const m = METRICS[n % METRICS.length];
      const product = pick(PRODUCTS);
      const keyed = n % 3 === 0;
      const dedup = !keyed && n % 20 === 1;
      const e: EventInput = {
        name: m.name,
        metric: {
          metric_name: m.metric,
          ...(m.value ? { value: Math.round(Math.random() * 20_000) / 100 } : {}),
          additional_properties: {
            product_name: product,
            sku: `SKU-${(n * 7919) % 100_000}`,
            quantity: 1 + (n % 4),
            currency: 'EUR',
            categories: ['apparel', 'summer'],
            source: n % 2 === 0 ? 'web' : 'pos',
          },
          ...(n % 4 === 0 ? { metric_object_id: randomUUID(), metric_object_type: 'order' } : {}),
          ...(dedup ? { deduping_key: `${opts.seed}-d-${n}` } : {}),
        },
        ...(n % 2 === 0 ? { contact: contact() } : {}),
        ...(n % 5 === 0 ? { description: `${m.name}: ${product}` } : {}),
        ...(n % 3 === 1 ? { event_time: new Date(Date.now() - (n % 600) * 1000).toISOString() } : {}),
        ...(keyed ? { remote_id: `${opts.seed}-${n}`, remote_platform: 'shopify' } : {}),
      };
      return e;
    },
  };
}

// Namespace of the synthetic contact ids (one per identity, as a resolved contact would have).
const CONTACT_NS = '6f1c2a8e-6a0e-4d8b-9a57-2a1d5f1e9b10';

/**
 * An `events` record as ingest-api would write it for e (its own key, id and record builder), with the
 * contact already resolved to a synthetic id per identity. For the projector scenario and the
 * bare-producer baseline.
 */
export function eventRecordOf(shopId: string, e: EventInput, requestId: string): EventRecord {
  const key = activityKey(e);
  const c = e.contact;
  return buildRecord(e, {
    id: activityId(shopId, key),
    key,
    shopId,
    requestId,
    receivedAt: new Date().toISOString(),
    contact: c
      ? {
          id: uuidv5(`${shopId}/${c.email ?? c.phone ?? c.remote_id}`, CONTACT_NS),
          email: c.email ?? null,
          phone: c.phone ?? null,
          remote_id: c.remote_id ?? null,
          name: c.name ?? null,
        }
      : null,
  });
}
