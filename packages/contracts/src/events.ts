import { z } from 'zod';

/**
 * RFC 3339 with an explicit offset (`Z` or `+hh:mm`). Year 0000 passes the format but Postgres refuses it
 * ("date/time field value out of range"): an event carrying it would be accepted and then fail its insert.
 */
export const rfc3339 = z.iso.datetime({ offset: true }).refine((v) => !v.startsWith('0000-'), 'Year 0000 does not exist; the first year is 0001.');

const FIRST_INSTANT = Date.parse('0001-01-01T00:00:00Z');
const LAST_INSTANT = Date.parse('9999-12-31T23:59:59.999Z');

/**
 * A time a client sends, which every projection must be able to store and answer back in RFC 3339: PostgreSQL
 * takes UTC offsets up to ±15:59 (RFC 3339 allows ±23:59: "+16:00" was accepted, then dead-lettered by the
 * projector), and the instant, once in UTC, must fall in years 0001 to 9999 (`9999-12-31T23:59:59-14:00` is in
 * year 10000 in UTC, and was answered as `+010000-...`, which is not RFC 3339).
 */
export const storableTime = rfc3339.superRefine((v, ctx) => {
  const offset = /([+-])(\d{2}):(\d{2})$/.exec(v);
  if (offset && Number(offset[2]) * 60 + Number(offset[3]) > 15 * 60 + 59) {
    ctx.addIssue({ code: 'custom', message: 'UTC offsets beyond ±15:59 cannot be stored: send this time in UTC (Z) or another offset.' });
    return;
  }
  const t = Date.parse(v);
  if (!(t >= FIRST_INSTANT && t <= LAST_INSTANT)) {
    ctx.addIssue({ code: 'custom', message: 'In UTC, the time must fall between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.' });
  }
});

/**
 * How deep additional_properties may nest: deep enough for any real payload (a cart with line items with
 * options is 4), and shallow enough that a maximal bulk body of deeply nested values is not a cheap way to make
 * ingest walk millions of containers.
 */
export const MAX_PROPERTIES_DEPTH = 16;

const UNSAFE_INTEGER = `An integer beyond ±${Number.MAX_SAFE_INTEGER} cannot be kept exactly (JSON numbers are doubles here): send it as a string.`;

/** A number JSON.parse may have rounded: an integral value past 2^53, where doubles no longer hold every integer. */
const isUnsafeInteger = (v: unknown): boolean => typeof v === 'number' && Number.isInteger(v) && !Number.isSafeInteger(v);

/**
 * The first problem of an additional_properties value, in one iterative walk (client data may nest deeper than
 * the call stack goes): a container deeper than `maxDepth`, or an integer JSON.parse rounded (12345678901234567890
 * arrives as 12345678901234567000, and would be stored so without a word). Its path is relative to the value.
 */
function propertiesProblem(root: object, maxDepth: number): { path: (string | number)[]; message: string } | null {
  // Frames hold a container, its keys (null for an array) and the next index; the path is rebuilt from the
  // frames only on a hit, so a clean value (nearly all) allocates nothing per entry: this runs on every event.
  type Frame = { v: object; keys: string[] | null; i: number; at: string | number };
  const stack: Frame[] = [{ v: root, keys: Array.isArray(root) ? null : Object.keys(root), i: 0, at: '' }];
  while (stack.length > 0) {
    const f = stack[stack.length - 1];
    const n = f.keys ? f.keys.length : (f.v as unknown[]).length;
    if (f.i >= n) {
      stack.pop();
      continue;
    }
    const key: string | number = f.keys ? f.keys[f.i++] : f.i++;
    const child = f.keys ? (f.v as Record<string, unknown>)[key] : (f.v as unknown[])[key as number];
    if (typeof child === 'number') {
      if (isUnsafeInteger(child)) return { path: [...stack.slice(1).map((s) => s.at), key], message: UNSAFE_INTEGER };
    } else if (child !== null && typeof child === 'object') {
      if (stack.length >= maxDepth) return { path: [], message: `Nested at most ${maxDepth} levels deep.` };
      stack.push({ v: child, keys: Array.isArray(child) ? null : Object.keys(child), i: 0, at: key });
    }
  }
  return null;
}

const MAX_PROPERTIES_BYTES = 64 * 1024;

/** "Required." for a missing field instead of zod's "expected string, received undefined". */
const required = { error: (issue: { input?: unknown }) => (issue.input === undefined ? 'Required.' : undefined) };

export const metricInputSchema = z
  .strictObject(
    {
      metric_name: z.string(required).trim().min(1, 'Required, not empty.').max(255),
      value: z
        .number({ error: 'Must be a finite number.' })
        .refine((v) => !isUnsafeInteger(v), UNSAFE_INTEGER)
        .describe(`A finite number; an integer must be within ±${Number.MAX_SAFE_INTEGER}.`)
        .optional(),
      additional_properties: z
        .record(z.string(), z.unknown())
        // First, and aborting: the size check below stringifies, which a deep enough value overflows.
        .superRefine((o, ctx) => {
          const problem = propertiesProblem(o, MAX_PROPERTIES_DEPTH);
          if (problem) ctx.addIssue({ code: 'custom', path: problem.path, message: problem.message, continue: false });
        })
        .refine((o) => Buffer.byteLength(JSON.stringify(o)) <= MAX_PROPERTIES_BYTES, {
          message: `At most ${MAX_PROPERTIES_BYTES} bytes of JSON.`,
        })
        .describe(
          `Any JSON object: at most ${MAX_PROPERTIES_BYTES} bytes of JSON, nested at most ${MAX_PROPERTIES_DEPTH} levels deep (the object is the first), integers within ±${Number.MAX_SAFE_INTEGER} (send larger ones as strings).`,
        )
        .optional(),
      context_object_id: z.uuid().optional(),
      context_object_type: z.string().max(255).optional(),
      metric_object_id: z.uuid().optional(),
      metric_object_type: z.string().max(255).optional(),
      deduping_key: z.string().min(1).max(255).normalize('NFC').optional(),
    },
    required,
  )
  .meta({ id: 'Metric' });
export type MetricInput = z.infer<typeof metricInputSchema>;

export const contactInputSchema = z
  .strictObject({
    // NFC: one identifier has one spelling (an "é" sent precomposed or as e + U+0301 is one contact).
    email: z.string().trim().max(254).normalize('NFC').toLowerCase().pipe(z.email()).optional(),
    name: z.string().max(255).optional(),
    phone: z.string().trim().min(1).max(64).optional(),
    remote_id: z.string().trim().min(1).max(255).normalize('NFC').optional(),
  })
  .refine((c) => c.email !== undefined || c.phone !== undefined || c.remote_id !== undefined, {
    message: 'Give at least one of email, phone, remote_id.',
  })
  .meta({ id: 'ContactInput' });
export type ContactInput = z.infer<typeof contactInputSchema>;

export const eventInputSchema = z
  .strictObject({
    name: z.string(required).trim().min(1, 'Required, not empty.').max(255),
    metric: metricInputSchema,
    contact: contactInputSchema.optional(),
    description: z.string().max(10_000).optional(),
    event_time: storableTime.optional(),
    // NFC, as the contact's identifiers: both spellings of one key are one activity (see activityKey).
    remote_id: z.string().min(1).max(255).normalize('NFC').nullable().optional(),
    remote_platform: z.string().max(255).normalize('NFC').nullable().optional(),
  })
  .meta({ id: 'Event' });
export type EventInput = z.infer<typeof eventInputSchema>;

export const MAX_BULK_EVENTS = 100;

/** The bulk body's outer shape; each item is validated on its own so one bad item fails alone. */
export const bulkRequestSchema = z
  .strictObject({
    events: z.array(z.unknown(), required).min(1, 'Give 1 to 100 events.').max(MAX_BULK_EVENTS, 'Give 1 to 100 events.'),
  })
  .meta({ id: 'BulkEventsRequest' });

/** The same body, with its items typed: for the OpenAPI document. */
export const bulkRequestDocSchema = z.strictObject({ events: z.array(eventInputSchema).min(1).max(MAX_BULK_EVENTS) });

export const contactSchema = z
  .object({
    id: z.uuid(),
    email: z.string().optional(),
    phone: z.string().optional(),
    remote_id: z.string().optional(),
  })
  .meta({ id: 'Contact' });
export type Contact = z.infer<typeof contactSchema>;

export const eventAcceptedSchema = z.object({ activity_id: z.uuid(), contact: contactSchema.optional() }).meta({ id: 'EventAccepted' });
export type EventAccepted = z.infer<typeof eventAcceptedSchema>;

import { errorObjectSchema } from './errors.js';

/** One item's result: a union on `status`, so a client that checked it has `event` (or `error`) for sure. */
export const bulkResultItemSchema = z
  .discriminatedUnion('status', [
    z.object({ index: z.number().int(), status: z.literal('success'), event: eventAcceptedSchema }),
    z.object({ index: z.number().int(), status: z.literal('error'), error: errorObjectSchema }),
  ])
  .meta({ id: 'BulkResultItem' });
export type BulkResultItem = z.infer<typeof bulkResultItemSchema>;

export const bulkResponseSchema = z.object({ results: z.array(bulkResultItemSchema) }).meta({ id: 'BulkEventsResponse' });

const uuidSchema = z.uuid();

/**
 * Whether s is a uuid as every record schema checks one (zod's RFC 9562 form: version and variant digits
 * included). The X-Shop-Id header, BOOTSTRAP_API_KEYS and the CLI use this same test, so no shop id that
 * passes the door can make its records fail their schema later (they would be dead-lettered, lost).
 */
export function isUuid(s: string): boolean {
  return uuidSchema.safeParse(s).success;
}
