import { describe, expect, it } from 'vitest';
import { rfc3339Micros } from './micros.js';

const ms = (iso: string) => BigInt(Date.parse(iso)) * 1000n;

describe('rfc3339Micros', () => {
  it('reads the time to the microsecond, offsets applied, further digits dropped', () => {
    expect(rfc3339Micros('2026-04-01T00:00:00Z')).toBe(ms('2026-04-01T00:00:00Z'));
    expect(rfc3339Micros('2026-04-01T00:00:00.123456Z')).toBe(ms('2026-04-01T00:00:00.123Z') + 456n);
    expect(rfc3339Micros('2026-04-01T02:00:00.1234567+02:00')).toBe(ms('2026-04-01T00:00:00.123Z') + 456n);
    expect(rfc3339Micros('2026-03-31T19:30:00-04:30')).toBe(ms('2026-04-01T00:00:00Z'));
    expect(rfc3339Micros('0050-06-01T00:00:00z')).toBe(ms('0050-06-01T00:00:00Z'));
  });

  it('orders two times a microsecond apart, even where a double is no longer exact', () => {
    const a = rfc3339Micros('9999-12-31T23:59:59.999998Z')!;
    const b = rfc3339Micros('9999-12-31T23:59:59.999999Z')!;
    expect(b - a).toBe(1n);
  });

  it('is null for what is not an RFC 3339 time or names no real date', () => {
    for (const bad of [
      '2026-04-01',
      '2026-04-01T00:00:00',
      '2026-02-30T00:00:00Z',
      '2026-04-01T24:00:00Z',
      '2026-04-01T00:00:60Z',
      '2026-04-01T00:00:00+0200',
      'now',
    ]) {
      expect(rfc3339Micros(bad), bad).toBeNull();
    }
  });
});
