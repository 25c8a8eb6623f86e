import { randomUUID } from 'node:crypto';
import { v5 as uuidv5, v7 as uuidv7 } from 'uuid';
import type { EventInput, EventRecord } from '@shopstream/contracts';

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

const NS = '6f1c2a8e-6a0e-4d8b-9a57-2a1d5f1e9b10';

/**
 * An `events` record as ingest-api would write it for e, with the contact already resolved (a synthetic
 * id per identity). For the projector scenario and the bare-producer baseline.
 */
export function eventRecordOf(shopId: string, e: EventInput, requestId: string): EventRecord {
  const key = e.remote_id ? `r:${e.remote_platform ?? ''}:${e.remote_id}` : e.metric.deduping_key ? `d:${e.metric.metric_name}:${e.metric.deduping_key}` : null;
  const id = key ? uuidv5(`${shopId}/${key}`, NS) : uuidv7();
  const now = new Date().toISOString();
  const c = e.contact;
  return {
    activity_id: id,
    shop_id: shopId,
    activity_key: key,
    name: e.name,
    description: e.description ?? null,
    event_time: e.event_time ?? now,
    received_at: now,
    remote_id: e.remote_id ?? null,
    remote_platform: e.remote_platform ?? null,
    metric: {
      metric_name: e.metric.metric_name,
      value: e.metric.value ?? null,
      additional_properties: e.metric.additional_properties ?? {},
      context_object_id: e.metric.context_object_id ?? null,
      context_object_type: e.metric.context_object_type ?? null,
      metric_object_id: e.metric.metric_object_id ?? null,
      metric_object_type: e.metric.metric_object_type ?? null,
      deduping_key: e.metric.deduping_key ?? null,
    },
    contact: c
      ? {
          id: uuidv5(`${shopId}/${c.email ?? c.phone ?? c.remote_id}`, NS),
          email: c.email ?? null,
          phone: c.phone ?? null,
          remote_id: c.remote_id ?? null,
          name: c.name ?? null,
        }
      : null,
    request_id: requestId,
  };
}
