import { z } from 'zod';
import { rfc3339 } from './events.js';
import { refineStorable } from './storableText.js';

export const conditionOperators = [
  'eq',
  'neq',
  'contains',
  'not_contains',
  'starts_with',
  'ends_with',
  'gt',
  'gte',
  'lt',
  'lte',
  'in',
  'not_in',
  'exists',
  'not_exists',
] as const;
export type ConditionOperator = (typeof conditionOperators)[number];

/** The contact fields a contact condition can test. */
export const contactConditionFields = ['email', 'phone', 'remote_id', 'name', 'id'] as const;
export type ContactConditionField = (typeof contactConditionFields)[number];

const scalar = z.union([z.string(), z.number().finite(), z.boolean()], { error: 'Give a string, a number or a boolean.' });

/** A dotted path into additional_properties: `cart.total`, `items.0.sku`. */
const propertyPath = z
  .string()
  .min(1, 'Required, not empty.')
  .max(255)
  .regex(/^[^.]+(\.[^.]+)*$/, 'A dotted path such as cart.total: no empty segment.');

const opMessage = `Unknown operator; one of ${conditionOperators.join(', ')}.`;

/** One condition; `value` is checked against what the operator needs, so a bad trigger never reaches the matcher. */
function conditionSchema<F extends z.ZodType<string>>(field: F) {
  return z.discriminatedUnion(
    'op',
    [
      z.strictObject({ field, op: z.enum(['eq', 'neq']), value: scalar }),
      z.strictObject({ field, op: z.enum(['contains', 'not_contains']), value: scalar }),
      z.strictObject({ field, op: z.enum(['starts_with', 'ends_with']), value: z.string({ error: 'Give a string.' }) }),
      z.strictObject({ field, op: z.enum(['gt', 'gte', 'lt', 'lte']), value: z.number({ error: 'Give a number.' }).finite() }),
      z.strictObject({
        field,
        op: z.enum(['in', 'not_in']),
        value: z.array(scalar, { error: 'Give an array of strings, numbers or booleans.' }).min(1, 'Give at least one value.').max(100),
      }),
      z.strictObject({ field, op: z.enum(['exists', 'not_exists']) }),
    ],
    { error: (iss) => (iss.code === 'invalid_union' ? opMessage : undefined) },
  );
}

export const propertyConditionSchema = conditionSchema(propertyPath).meta({ id: 'PropertyCondition' });
export type PropertyCondition = z.infer<typeof propertyConditionSchema>;

export const contactConditionSchema = conditionSchema(z.enum(contactConditionFields, { error: `One of ${contactConditionFields.join(', ')}.` })).meta({
  id: 'ContactCondition',
});
export type ContactCondition = z.infer<typeof contactConditionSchema>;

/** Either kind of condition, as the matcher evaluates it. */
export type Condition = PropertyCondition | ContactCondition;

export const MAX_CONDITIONS = 50;

export const flowTriggerSchema = z
  .strictObject({
    metric_name: z.string({ error: 'Required.' }).trim().min(1, 'Required, not empty.').max(255),
    property_conditions: z.array(propertyConditionSchema).max(MAX_CONDITIONS).default([]),
    contact_conditions: z.array(contactConditionSchema).max(MAX_CONDITIONS).default([]),
  })
  .meta({ id: 'FlowTrigger' });
export type FlowTrigger = z.infer<typeof flowTriggerSchema>;

export const flowStatuses = ['active', 'paused'] as const;
export type FlowStatus = (typeof flowStatuses)[number];

const flowName = z.string({ error: 'Required.' }).trim().min(1, 'Required, not empty.').max(255);

export const flowCreateSchema = z
  .strictObject({
    name: flowName,
    status: z.enum(flowStatuses).default('active'),
    trigger: flowTriggerSchema,
  })
  // Text Postgres cannot store (NUL, a lone surrogate) in a name, metric name or condition: a 400, as for events.
  .superRefine(refineStorable)
  .meta({ id: 'FlowCreate' });
export type FlowCreate = z.infer<typeof flowCreateSchema>;

export const flowUpdateSchema = z
  .strictObject({
    name: flowName.optional(),
    status: z.enum(flowStatuses).optional(),
    /** Replaces the whole trigger. */
    trigger: flowTriggerSchema.optional(),
  })
  .refine((u) => u.name !== undefined || u.status !== undefined || u.trigger !== undefined, { message: 'Give at least one of name, status, trigger.' })
  .superRefine(refineStorable)
  .meta({ id: 'FlowUpdate' });
export type FlowUpdate = z.infer<typeof flowUpdateSchema>;

export const flowSchema = z
  .object({
    id: z.uuid(),
    name: z.string(),
    status: z.enum(flowStatuses),
    trigger: flowTriggerSchema,
    created_at: rfc3339,
    updated_at: rfc3339,
  })
  .meta({ id: 'Flow' });
export type Flow = z.infer<typeof flowSchema>;

/** One match of a flow: unique per (flow, metric event). */
export const flowTriggerEntrySchema = z
  .object({
    id: z.uuid(),
    flow_id: z.uuid(),
    metric_event_id: z.uuid(),
    activity_id: z.uuid(),
    contact_id: z.uuid().nullable(),
    matched_at: rfc3339,
  })
  .meta({ id: 'FlowTriggerEntry' });
export type FlowTriggerEntry = z.infer<typeof flowTriggerEntrySchema>;

/** `limit` of every cursor page: 1 to 100, default 100. */
export const pageLimitParam = z
  .string()
  .regex(/^\d+$/, 'An integer from 1 to 100.')
  .transform(Number)
  .pipe(z.number().int().min(1, 'An integer from 1 to 100.').max(100, 'An integer from 1 to 100.'))
  .optional()
  .describe('Items in the page, 1 to 100; default 100.');

export const cursorParam = z.string().min(1).max(4096).optional().describe("Taken from a previous page's `next` or `previous` link.");

export const flowListQuerySchema = z.strictObject({
  status: z.enum(flowStatuses).optional().describe('Only flows with this status.'),
  limit: pageLimitParam,
  cursor: cursorParam,
});

export const pageQuerySchema = z.strictObject({ limit: pageLimitParam, cursor: cursorParam });

/** A cursor page, shaped like the export's. */
export const pageOf = <T extends z.ZodType>(item: T, id: string) =>
  z.object({ results: z.array(item), next: z.url().nullable(), previous: z.url().nullable() }).meta({ id });

export const flowPageSchema = pageOf(flowSchema, 'FlowPage');
export const flowTriggerPageSchema = pageOf(flowTriggerEntrySchema, 'FlowTriggerPage');
