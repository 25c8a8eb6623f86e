/** Figures and rows the scenarios report alike: durations in seconds, answers by status, goals of none or of a bound. */
import type { Row } from './types.js';

/** Milliseconds as seconds to a tenth, or `never` for what did not happen. */
export const sec = (ms: number | undefined): number | string => (ms === undefined ? 'never' : Number((ms / 1000).toFixed(1)));

/** Answers counted by status, as `202: 9120, 503: 41`. */
export const byStatus = (counts: Record<string, number>): string =>
  Object.entries(counts)
    .sort()
    .map(([s, n]) => `${s}: ${n}`)
    .join(', ');

/** A count whose goal is none. */
export const noneRow = (measure: string, value: number): Row => ({ measure, value, goal: { text: '0', met: value === 0 } });

/** The 5xx answers other than 503 (the answer a fault may call for, with Retry-After): the goal is none. */
export const serverErrorsRow = (statuses: Record<string, number>): Row =>
  noneRow(
    '5xx other than 503',
    Object.entries(statuses)
      .filter(([s]) => /^5/.test(s) && s !== '503')
      .reduce((a, [, n]) => a + n, 0),
  );

/** How long something took, in seconds, with its goal of at most `limitMs` (never: not met). */
export const withinRow = (measure: string, ms: number | undefined, limitMs: number, unit = 's'): Row => ({
  measure,
  value: sec(ms),
  unit,
  goal: { text: `≤ ${limitMs / 1000} s`, met: ms !== undefined && ms <= limitMs },
});
