import { parsePhoneNumberFromString } from 'libphonenumber-js/max';

// Parsing with the full metadata is one of the dearest steps of an event, and returning customers send the
// same numbers again and again: answers are remembered (bounded; cleared when full, as ApiKeyStore's cache).
const PHONE_CACHE_MAX = 20_000;
const phoneCache = new Map<string, string | null>();

/** E.164 (`+14155552671`), or null when the number is not a valid one. Only international input is accepted: a shop has no default country. */
export function normalizePhone(raw: string): string | null {
  const hit = phoneCache.get(raw);
  if (hit !== undefined) return hit;
  const parsed = parsePhoneNumberFromString(raw.trim());
  const phone = parsed && parsed.isValid() ? parsed.number : null;
  if (phoneCache.size >= PHONE_CACHE_MAX) phoneCache.clear();
  phoneCache.set(raw, phone);
  return phone;
}
