const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/;

/**
 * An RFC 3339 time (`2026-01-02T03:04:05.123456+02:00`, the form every record schema admits) as microseconds
 * since the epoch, or null when it is not one or names no real date. Microseconds are PostgreSQL's precision:
 * further digits are dropped, and two times compare here as `timestamptz` compares them (Date.parse stops at
 * milliseconds). A bigint, exact for every year 0001 to 9999 (a double is exact only to about 2255).
 */
export function rfc3339Micros(text: string): bigint | null {
  const m = RFC3339.exec(text);
  if (!m) return null;
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number);
  if (h > 23 || mi > 59 || s > 59) return null;
  // Not Date.UTC(y, ...): it reads years 0-99 as 1900-1999.
  const date = new Date(0);
  date.setUTCFullYear(y, mo - 1, d);
  date.setUTCHours(h, mi, s, 0);
  if (date.getUTCFullYear() !== y || date.getUTCMonth() !== mo - 1 || date.getUTCDate() !== d) return null;
  const offsetMinutes = m[8] ? (m[8] === '-' ? -1 : 1) * (Number(m[9]) * 60 + Number(m[10])) : 0;
  const fraction = BigInt((m[7] ?? '').padEnd(6, '0').slice(0, 6));
  return BigInt(date.getTime() - offsetMinutes * 60_000) * 1000n + fraction;
}
