import type { Request } from 'express';
import { isUuid } from '@shopstream/contracts';

/** A path parameter that should be a uuid, lowercased; null when it is not one (it cannot name a row). */
export function uuidParam(req: Request, name: string): string | null {
  const v = String(req.params[name]);
  return isUuid(v) ? v.toLowerCase() : null;
}
