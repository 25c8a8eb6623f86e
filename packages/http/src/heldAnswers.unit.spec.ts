import http from 'node:http';
import { describe, expect, it } from 'vitest';
import { HeldAnswers } from './heldAnswers.js';

/** A response as HeldAnswers sees one: only whether its client is still there and unanswered. */
const response = (state: { destroyed?: boolean; writableEnded?: boolean } = {}) =>
  ({ destroyed: false, writableEnded: false, ...state }) as http.ServerResponse;

describe('HeldAnswers', () => {
  it('sends each answer after half to all of the hold, none at once', async () => {
    const held = new HeldAnswers(40);
    const sent: number[] = [];
    let allSent!: () => void;
    const done = new Promise<void>((resolve) => (allSent = resolve));
    for (let i = 0; i < 20; i++) held.hold(response(), () => sent.push(i) === 20 && allSent());
    expect(sent).toEqual([]);
    expect(held.size).toBe(20);
    await done;
    expect(sent.sort((a, b) => a - b)).toEqual([...Array(20).keys()]);
    expect(held.size).toBe(0);
  });

  it('sends at once when holding is off or `max` answers are held already', () => {
    const sent: string[] = [];
    new HeldAnswers(0).hold(response(), () => sent.push('off'));
    const full = new HeldAnswers(60_000, 2);
    full.hold(response(), () => sent.push('held 1'));
    full.hold(response(), () => sent.push('held 2'));
    full.hold(response(), () => sent.push('over max'));
    expect(sent).toEqual(['off', 'over max']);
    full.release();
    expect(sent).toEqual(['off', 'over max', 'held 1', 'held 2']);
  });

  it('drops the answer of a client that went away or was answered meanwhile', () => {
    const held = new HeldAnswers(60_000);
    const sent: string[] = [];
    held.hold(response({ destroyed: true }), () => sent.push('gone'));
    held.hold(response({ writableEnded: true }), () => sent.push('answered'));
    held.hold(response(), () => sent.push('here'));
    held.release();
    expect(sent).toEqual(['here']);
    expect(held.size).toBe(0);
  });
});
