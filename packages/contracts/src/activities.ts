import { z } from 'zod';
import { rfc3339 } from './events.js';
import { recordedMetricSchema, resolvedContactSchema } from './records.js';
import { cursorParam, pageLimitParam, pageOf } from './flows.js';

/** An Activity as the query API shows it. Fields typed "or null" are always present. */
export const activitySchema = z
  .object({
    id: z.uuid(),
    name: z.string(),
    description: z.string().nullable(),
    event_time: rfc3339,
    recorded_at: rfc3339,
    metric: recordedMetricSchema,
    contact: resolvedContactSchema.nullable(),
    remote_id: z.string().nullable(),
    remote_platform: z.string().nullable(),
  })
  .meta({ id: 'Activity' });
export type Activity = z.infer<typeof activitySchema>;

export const activityListQuerySchema = z.strictObject({
  scope: z.literal('workspace', { error: 'Required: workspace (the activities without a contact).' }).describe('Required: `workspace`.'),
  limit: pageLimitParam,
  cursor: cursorParam,
});

export const activityPageSchema = pageOf(activitySchema, 'ActivityPage');
