import { z } from 'zod';

export const errorCodes = [
  'validation_error',
  'invalid_json',
  'bad_request',
  'invalid_cursor',
  'unauthorized',
  'invalid_shop',
  'forbidden',
  'not_found',
  'method_not_allowed',
  'request_timeout',
  'expectation_failed',
  'payload_too_large',
  'headers_too_large',
  'unsupported_media_type',
  'rate_limited',
  'unavailable',
  'internal_error',
] as const;
export type ErrorCode = (typeof errorCodes)[number];

export const errorObjectSchema = z
  .object({
    code: z.enum(errorCodes),
    message: z.string(),
    request_id: z.string(),
    fields: z.record(z.string(), z.unknown()),
  })
  .meta({ id: 'Error' });
export type ErrorObject = z.infer<typeof errorObjectSchema>;

export const errorBodySchema = z.object({ error: errorObjectSchema }).meta({ id: 'ErrorBody' });
export type ErrorBody = z.infer<typeof errorBodySchema>;

/**
 * Turns a zod error into the envelope's `fields`: a dotted path (`metric.metric_name`,
 * `events.3.contact.email`) mapped to the first message for that path.
 */
export function fieldErrors(error: z.ZodError, prefix: (string | number)[] = []): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const issue of error.issues) {
    const keys = issue.code === 'unrecognized_keys' ? issue.keys.map((k) => [...issue.path, k]) : [issue.path];
    for (const p of keys) {
      const key = [...prefix, ...p].map(String).join('.') || '(body)';
      const message = issue.code === 'unrecognized_keys' ? 'Unknown field.' : issue.message;
      fields[key] ??= message;
    }
  }
  return fields;
}
