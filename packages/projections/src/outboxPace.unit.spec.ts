import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { freshPace, slowed } from './outbox.js';

// The relay's pace after failed sends, on a clock the test sets: what it waits before each next round.
describe('outbox relay pace after failed sends', () => {
  beforeEach(() => {
    vi.useFakeTimers();
    vi.setSystemTime(new Date('2026-11-27T10:00:00Z'));
  });
  afterEach(() => vi.useRealTimers());

  it('probes with one row after a failed round, and waits at most 2 s between probes however many fail', () => {
    const pace = freshPace();
    slowed(pace, 'metrics', 5_000);
    expect(pace.rows).toBe(1);
    expect(pace.ceiling).toBe(1_250);
    const waits = [pace.resumeAt - Date.now()];
    // A broker away for a minute: one probe a second or two, each failing.
    for (let i = 0; i < 30; i++) {
      vi.setSystemTime(pace.resumeAt);
      slowed(pace, 'metrics', pace.rows);
      waits.push(pace.resumeAt - Date.now());
    }
    expect(waits.slice(0, 4)).toEqual([500, 1_000, 2_000, 2_000]);
    expect(Math.max(...waits)).toBe(2_000);
    // A failed probe leaves the ceiling where the failed round put it.
    expect(pace.ceiling).toBe(1_250);
    expect(pace.rows).toBe(1);
  });
});
