import { describe, expect, it } from 'vitest';
import { ApiError } from '@shopstream/http';
import { canonicalRange, formatMicros, parseRange, parseUtc, resolveRange } from './exportRange.js';

const now = Date.parse('2026-04-15T12:00:00.000Z') * 1000;
const at = (iso: string) => Date.parse(iso) * 1000;

function fieldsOf(fn: () => unknown): Record<string, unknown> {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    expect((e as ApiError).code).toBe('validation_error');
    return (e as ApiError).fields;
  }
  throw new Error('expected a 400');
}

describe('export ranges', () => {
  it('reads UTC timestamps to the microsecond and writes them back', () => {
    expect(parseUtc('2026-04-01T00:00:00Z')).toBe(at('2026-04-01T00:00:00Z'));
    expect(parseUtc('2026-04-01T00:00:00.123456Z')).toBe(at('2026-04-01T00:00:00.123Z') + 456);
    expect(parseUtc('2026-04-01T00:00:00.1234567+00:00')).toBe(at('2026-04-01T00:00:00.123Z') + 456);
    expect(formatMicros(at('2026-04-01T00:00:00.123Z') + 456)).toBe('2026-04-01T00:00:00.123456Z');
    expect(formatMicros(at('2026-04-01T00:00:00Z'))).toBe('2026-04-01T00:00:00.000000Z');
    for (const bad of ['2026-04-01', '2026-04-01T00:00:00', '2026-04-01T00:00:00+01:00', '2026-02-30T00:00:00Z', '2026-04-01T24:00:00Z', 'now']) {
      expect(parseUtc(bad), bad).toBeNull();
    }
  });

  it('resolves relative sides against now, an empty end as now', () => {
    expect(resolveRange('r', parseRange('r', 'relative:-7d,'), now)).toEqual({ start: now - 7 * 86_400e6, end: now });
    expect(resolveRange('r', parseRange('r', 'relative:-2w,relative:-90m'), now)).toEqual({ start: now - 14 * 86_400e6, end: now - 90 * 60e6 });
    expect(resolveRange('r', parseRange('r', 'relative:-3h,2026-04-15T13:00:00Z'), now)).toEqual({ start: now - 3 * 3600e6, end: at('2026-04-15T13:00:00Z') });
    // Exactly 30 days is allowed.
    expect(resolveRange('r', parseRange('r', '2026-03-01T00:00:00Z,2026-03-31T00:00:00Z'), now).end).toBe(at('2026-03-31T00:00:00Z'));
  });

  it('rejects an empty start, a reversed or empty window and one over 30 days, naming the parameter', () => {
    expect(fieldsOf(() => parseRange('created_at__range', ',relative:-1d'))).toEqual({ created_at__range: expect.stringContaining('start is required') });
    expect(fieldsOf(() => parseRange('x', 'relative:-1d'))).toEqual({ x: expect.any(String) });
    expect(fieldsOf(() => parseRange('x', 'relative:-1y,'))).toEqual({ x: expect.stringContaining('start must be') });
    expect(fieldsOf(() => parseRange('x', 'relative:-1d,tomorrow'))).toEqual({ x: expect.stringContaining('end must be') });
    expect(fieldsOf(() => resolveRange('x', parseRange('x', 'relative:-1h,relative:-2h'), now))).toEqual({ x: expect.stringContaining('before the end') });
    expect(fieldsOf(() => resolveRange('x', parseRange('x', 'relative:-1h,relative:-1h'), now))).toEqual({ x: expect.stringContaining('before the end') });
    expect(fieldsOf(() => resolveRange('x', parseRange('x', 'relative:-43201m,'), now))).toEqual({ x: expect.stringContaining('30 days') });
  });

  it('rejects a relative side that resolves before year 1, which Postgres cannot take, as a 400 on the parameter', () => {
    // Seven digits of weeks reach year -17139: formatMicros would write an extended year and the query would fail (500).
    expect(fieldsOf(() => resolveRange('created_at__range', parseRange('created_at__range', 'relative:-1000000w,relative:-999999w'), now))).toEqual({
      created_at__range: expect.stringContaining('start is before 0001-01-01'),
    });
    expect(fieldsOf(() => resolveRange('x', parseRange('x', 'relative:-9999999w,relative:-9999998w'), now))).toEqual({
      x: expect.stringContaining('start is before 0001-01-01'),
    });
    // The boundary: from a midnight, a whole number of days reaches 0001-01-01T00:00:00Z exactly; one more day does not.
    const midnight = at('2026-04-15T00:00:00Z');
    const earliest = at('0001-01-01T00:00:00Z');
    const days = (midnight - earliest) / 86_400e6;
    expect(Number.isInteger(days)).toBe(true);
    expect(resolveRange('x', parseRange('x', `relative:-${days}d,relative:-${days - 1}d`), midnight)).toEqual({ start: earliest, end: earliest + 86_400e6 });
    expect(formatMicros(earliest)).toBe('0001-01-01T00:00:00.000000Z');
    expect(fieldsOf(() => resolveRange('x', parseRange('x', `relative:-${days + 1}d,relative:-${days - 1}d`), midnight))).toEqual({
      x: expect.stringContaining('start is before'),
    });
    expect(fieldsOf(() => resolveRange('x', parseRange('x', `relative:-${days + 2}d,relative:-${days + 1}d`), midnight))).toEqual({
      x: expect.stringContaining('start is before'),
    });
  });

  it('reads years 0001-0099 as themselves (Date.UTC would read 0050 as 1950)', () => {
    expect(formatMicros(at('0050-06-01T00:00:00Z'))).toBe('0050-06-01T00:00:00.000000Z');
    expect(resolveRange('x', parseRange('x', '0050-06-01T00:00:00Z,0050-06-02T00:00:00Z'), now)).toEqual({
      start: at('0050-06-01T00:00:00Z'),
      end: at('0050-06-02T00:00:00Z'),
    });
  });

  it('writes equal ranges the same way for the cursor fingerprint', () => {
    expect(canonicalRange(parseRange('r', '2026-04-01T00:00:00Z,'))).toBe(canonicalRange(parseRange('r', '2026-04-01T00:00:00.000+00:00, ')));
    expect(canonicalRange(parseRange('r', 'relative:-1w,'))).toBe(canonicalRange(parseRange('r', 'relative:-7d,')));
    expect(canonicalRange(parseRange('r', 'relative:-7d,'))).not.toBe(canonicalRange(parseRange('r', 'relative:-6d,')));
  });
});
