import http from 'node:http';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HeldAnswers } from './heldAnswers.js';

/** A response as HeldAnswers sees one: only whether its client is still there and unanswered. */
const response = (state: { destroyed?: boolean; writableEnded?: boolean } = {}) =>
  ({ destroyed: false, writableEnded: false, ...state }) as http.ServerResponse;

describe('HeldAnswers', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('sends each answer after half to all of the hold, none before', () => {
    const held = new HeldAnswers(40);
    const sent: number[] = [];
    for (let i = 0; i < 20; i++) held.hold(response(), () => sent.push(i));
    vi.advanceTimersByTime(19);
    expect(sent).toEqual([]);
    vi.advanceTimersByTime(21);
    expect(sent.sort((a, b) => a - b)).toEqual([...Array(20).keys()]);
  });

  it('sends at once when holding is off or `max` answers are held already, and holds again once one left', () => {
    const sent: string[] = [];
    new HeldAnswers(0).hold(response(), () => sent.push('off'));
    const full = new HeldAnswers(1_000, 2);
    full.hold(response(), () => sent.push('held 1'));
    full.hold(response(), () => sent.push('held 2'));
    full.hold(response(), () => sent.push('over max'));
    expect(sent).toEqual(['off', 'over max']);
    vi.advanceTimersByTime(1_000);
    expect(sent.slice(2).sort()).toEqual(['held 1', 'held 2']);
    full.hold(response(), () => sent.push('held 3'));
    expect(sent).not.toContain('held 3');
    vi.advanceTimersByTime(1_000);
    expect(sent).toContain('held 3');
  });

  it('drops the answer of a client that went away or was answered meanwhile', () => {
    const held = new HeldAnswers(1_000);
    const sent: string[] = [];
    held.hold(response({ destroyed: true }), () => sent.push('gone'));
    held.hold(response({ writableEnded: true }), () => sent.push('answered'));
    held.hold(response(), () => sent.push('here'));
    vi.advanceTimersByTime(1_000);
    expect(sent).toEqual(['here']);
  });
});
