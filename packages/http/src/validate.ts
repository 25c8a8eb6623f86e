import type { z } from 'zod';
import { fieldErrors } from '@shopstream/contracts';
import { ApiError } from './errors.js';

/** Parses with the schema or throws a 400 `validation_error` whose `fields` name each bad path. */
export function validate<S extends z.ZodType>(schema: S, input: unknown, what = 'The request', prefix: (string | number)[] = []): z.infer<S> {
  const r = schema.safeParse(input);
  if (!r.success) throw new ApiError('validation_error', `${what} is not valid.`, fieldErrors(r.error, prefix));
  return r.data;
}
