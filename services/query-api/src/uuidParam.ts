import type { Request } from 'express';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A path parameter that should be a uuid, lowercased; null when it is not one (it cannot name a row). */
export function uuidParam(req: Request, name: string): string | null {
  const v = String(req.params[name]);
  return UUID.test(v) ? v.toLowerCase() : null;
}
