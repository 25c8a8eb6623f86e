import { ApiError } from '@shopstream/http';
import { MAX_EXPORT_WINDOW_DAYS, rfc3339Micros } from '@shopstream/contracts';

/**
 * Times here are microseconds since the epoch (Postgres's precision; well inside a double's exact range)
 * and travel to SQL as RFC 3339 text with six decimals, so no bound loses precision on its way.
 */
export type Micros = number;

const UNIT_MINUTES = { m: 1, h: 60, d: 60 * 24, w: 60 * 24 * 7 } as const;
const MINUTE_US = 60_000_000;
const WINDOW_US = MAX_EXPORT_WINDOW_DAYS * 24 * 60 * MINUTE_US;
/**
 * 0001-01-01T00:00:00Z. A relative side can reach far before it (seven digits of weeks is 190,000 years), and
 * formatMicros then writes an extended year (`-017139-...`) that Postgres refuses: a 400 here, not a 500 there.
 */
const EARLIEST_US = Date.parse('0001-01-01T00:00:00Z') * 1000;

/** One side of a range as written: canonical, so that `2026-01-01T00:00:00Z` and `...00.000Z` are the same filter. */
export type RangeSide = { kind: 'absolute'; at: Micros } | { kind: 'relative'; minutes: number } | { kind: 'empty' };

export interface Window {
  start: Micros;
  end: Micros;
}

/** The UTC forms a range side takes: `Z` or `+00:00`, at most nine decimals. */
const UTC_FORM = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]00:00)$/;

/** An RFC 3339 UTC timestamp (`Z` or `+00:00`) in microseconds, or null when it is not one (or not a real date). */
export function parseUtc(text: string): Micros | null {
  if (!UTC_FORM.test(text)) return null;
  const us = rfc3339Micros(text);
  return us === null ? null : Number(us);
}

/** `2026-01-02T03:04:05.123456Z`: what SQL receives and what cursors carry. */
export function formatMicros(us: Micros): string {
  const ms = Math.floor(us / 1000);
  const rest = us - ms * 1000;
  return new Date(ms).toISOString().replace(/Z$/, `${String(rest).padStart(3, '0')}Z`);
}

function parseSide(text: string): RangeSide | null {
  const t = text.trim();
  if (t === '') return { kind: 'empty' };
  const rel = /^relative:-(\d{1,7})([mhdw])$/.exec(t);
  if (rel) return { kind: 'relative', minutes: Number(rel[1]) * UNIT_MINUTES[rel[2] as keyof typeof UNIT_MINUTES] };
  const at = parseUtc(t);
  return at === null ? null : { kind: 'absolute', at };
}

export interface ParsedRange {
  start: RangeSide;
  end: RangeSide;
}

const bad = (param: string, message: string) => new ApiError('validation_error', `The query parameter ${param} is not valid.`, { [param]: message });

/** The two sides of `<start>,<end>`, checked for form only (no clock needed). */
export function parseRange(param: string, text: string): ParsedRange {
  const parts = text.split(',');
  if (parts.length !== 2) throw bad(param, 'Give "<start>,<end>".');
  const start = parseSide(parts[0]);
  const end = parseSide(parts[1]);
  const form = 'an RFC 3339 UTC timestamp (e.g. 2026-04-01T00:00:00Z) or relative:-<n><m|h|d|w>';
  if (!start) throw bad(param, `The start must be ${form}.`);
  if (!end) throw bad(param, `The end must be ${form}, or empty for now.`);
  if (start.kind === 'empty') throw bad(param, 'The start is required (e.g. relative:-7d,).');
  return { start, end };
}

/** Resolves a range at `now`: an empty end is now; the window must be non-empty and at most 30 days. */
export function resolveRange(param: string, range: ParsedRange, now: Micros): Window {
  const at = (s: RangeSide): Micros => {
    switch (s.kind) {
      case 'absolute':
        return s.at;
      case 'relative':
        return now - s.minutes * MINUTE_US;
      case 'empty':
        return now;
      default: {
        const never: never = s;
        throw new Error(`unhandled range side ${JSON.stringify(never)}`);
      }
    }
  };
  const start = at(range.start);
  const end = at(range.end);
  if (start < EARLIEST_US) throw bad(param, 'The start is before 0001-01-01T00:00:00Z.');
  if (end < EARLIEST_US) throw bad(param, 'The end is before 0001-01-01T00:00:00Z.');
  if (start >= end) throw bad(param, 'The start must be before the end (the window is start <= t < end).');
  if (end - start > WINDOW_US) throw bad(param, `The window is at most ${MAX_EXPORT_WINDOW_DAYS} days; page through larger spans window by window.`);
  return { start, end };
}

/** The range as a stable string, for the cursor's filter fingerprint. */
export function canonicalRange(r: ParsedRange): string {
  const side = (s: RangeSide) => (s.kind === 'absolute' ? formatMicros(s.at) : s.kind === 'relative' ? `relative:-${s.minutes}m` : '');
  return `${side(r.start)},${side(r.end)}`;
}
