import { EventEmitter } from 'node:events';
import type { NextFunction, Request, Response } from 'express';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { BYTES_READ, largeBodyGate, refuseUnreadable } from './largeBodies.js';

/** A request of `bytes` (Content-Length; undefined: chunked) and its response, as the gate sees them. */
function exchange(bytes: number | undefined) {
  const req = Object.assign(new EventEmitter(), {
    headers: bytes === undefined ? {} : { 'content-length': String(bytes) },
    body: undefined as unknown,
    complete: false,
  });
  const res = new EventEmitter();
  const outcome: { taken: boolean; error?: unknown } = { taken: false };
  const next: NextFunction = (error?: unknown) => {
    if (error === undefined) outcome.taken = true;
    else outcome.error = error;
  };
  return {
    req,
    outcome,
    enter: (gate: ReturnType<typeof largeBodyGate>) => gate(req as unknown as Request, res as unknown as Response, next),
    /** Answered: after its body was read as bytes (`read` of them), or parsed (`'parsed'`: the whole request arrived), or refused unread. */
    done: (read?: number | 'parsed') => {
      if (read === 'parsed') {
        req.complete = true;
        req.body = { events: [] };
      } else if (read !== undefined) req.body = Buffer.alloc(read);
      res.emit('close');
    },
  };
}

const MB = 1024 * 1024;

describe('largeBodyGate', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const gate = (bytesPerSecond: number, max = 4) => largeBodyGate({ thresholdBytes: MB, max, waitMs: 2_000, bytesPerSecond, now: () => Date.now() });

  it('passes small bodies without a turn or a charge', () => {
    const g = gate(MB, 1);
    const big = exchange(6 * MB);
    big.enter(g);
    expect(big.outcome.taken).toBe(true);
    for (let i = 0; i < 10; i++) {
      const small = exchange(MB);
      small.enter(g);
      expect(small.outcome.taken).toBe(true);
    }
  });

  it('takes a body larger than the budget, then makes the next wait until the debt is paid off', () => {
    const g = gate(4 * MB);
    const first = exchange(6 * MB);
    first.enter(g);
    expect(first.outcome.taken).toBe(true);
    first.done(6 * MB);
    // 6 MB taken from a bucket of 4: 2 MB of debt, half a second at 4 MB/s.
    const second = exchange(6 * MB);
    second.enter(g);
    expect(second.outcome.taken).toBe(false);
    vi.advanceTimersByTime(499);
    expect(second.outcome.taken).toBe(false);
    vi.advanceTimersByTime(2);
    expect(second.outcome.taken).toBe(true);
  });

  it('answers 503 to a body whose turn does not come within waitMs, and keeps the order of those waiting', () => {
    const g = gate(2 * MB, 1);
    const a = exchange(5 * MB);
    a.enter(g);
    a.done(5 * MB);
    // 3 MB of debt: 1.5 s before the next; then 3 MB more: the third waits past 2 s.
    const b = exchange(5 * MB);
    const c = exchange(5 * MB);
    b.enter(g);
    c.enter(g);
    vi.advanceTimersByTime(1_501);
    expect(b.outcome.taken).toBe(true);
    b.done(5 * MB);
    expect(c.outcome.taken).toBe(false);
    vi.advanceTimersByTime(500);
    expect(c.outcome.taken).toBe(false);
    expect(c.outcome.error).toMatchObject({ status: 503, code: 'unavailable' });
  });

  it('charges a body of unknown length what it read, once read', () => {
    const g = gate(4 * MB);
    const chunked = exchange(undefined);
    chunked.enter(g);
    expect(chunked.outcome.taken).toBe(true);
    chunked.done(8 * MB);
    // 8 MB read from a bucket of 4: a second's debt.
    const next = exchange(2 * MB);
    next.enter(g);
    expect(next.outcome.taken).toBe(false);
    vi.advanceTimersByTime(1_001);
    expect(next.outcome.taken).toBe(true);
  });

  it('charges a body refused before it was read nothing, and one parsed on the event loop its Content-Length', () => {
    const g = gate(4 * MB);
    // Past the size limit (413), refused unread: the next is taken at once.
    const refused = exchange(11 * MB);
    refused.enter(g);
    refused.done();
    const parsed = exchange(6 * MB);
    parsed.enter(g);
    expect(parsed.outcome.taken).toBe(true);
    parsed.done('parsed');
    // 6 MB parsed from a bucket of 4: half a second's debt.
    const next = exchange(2 * MB);
    next.enter(g);
    expect(next.outcome.taken).toBe(false);
    vi.advanceTimersByTime(501);
    expect(next.outcome.taken).toBe(true);
  });

  it('charges what the reader recorded when it moved the bytes on (the body pool leaves req.body empty)', () => {
    const g = gate(4 * MB);
    // Chunked: no Content-Length to fall back on.
    const moved = exchange(undefined);
    moved.enter(g);
    Object.assign(moved.req, { [BYTES_READ]: 6 * MB, body: Buffer.alloc(0), complete: true });
    moved.done();
    const next = exchange(2 * MB);
    next.enter(g);
    expect(next.outcome.taken).toBe(false);
    vi.advanceTimersByTime(501);
    expect(next.outcome.taken).toBe(true);
  });

  it('with no byte budget (0), only the number at a time bounds them', () => {
    const g = gate(0, 2);
    const [a, b, c] = [exchange(6 * MB), exchange(6 * MB), exchange(6 * MB)];
    a.enter(g);
    b.enter(g);
    c.enter(g);
    expect([a, b, c].map((x) => x.outcome.taken)).toEqual([true, true, false]);
    a.done();
    expect(c.outcome.taken).toBe(true);
  });

  it('a client that leaves while waiting gives up its place', () => {
    const g = gate(0, 1);
    const [a, b, c] = [exchange(6 * MB), exchange(6 * MB), exchange(6 * MB)];
    a.enter(g);
    b.enter(g);
    c.enter(g);
    b.req.emit('close');
    a.done();
    expect(b.outcome.taken).toBe(false);
    expect(c.outcome.taken).toBe(true);
  });
});

describe('refuseUnreadable: what body-parser would refuse unread is refused before the large-body gate', () => {
  const check = (headers: Record<string, string>) => {
    let passed: unknown = 'not called';
    refuseUnreadable(1024)({ headers } as unknown as Request, {} as Response, ((e?: unknown) => (passed = e)) as NextFunction);
    return passed as { status?: number; type?: string; limit?: number } | undefined;
  };

  it('a content encoding body-parser cannot decode: its 415, whatever the length', () => {
    for (const encoding of ['bogus', 'gzip, gzip', 'x-gzip'])
      expect(check({ 'content-encoding': encoding, 'content-length': String(11 * 1024 * 1024) })).toMatchObject({ status: 415, type: 'encoding.unsupported' });
  });

  it('an uncompressed body past the limit by its Content-Length: its 413, with the limit', () => {
    expect(check({ 'content-length': '1025' })).toMatchObject({ status: 413, type: 'entity.too.large', limit: 1024 });
    expect(check({ 'content-encoding': 'Identity', 'content-length': '4096' })).toMatchObject({ status: 413 });
  });

  it('passes on what must be read to be judged: within the limit, chunked, or compressed (the limit is on the inflated bytes)', () => {
    expect(check({ 'content-length': '1024' })).toBeUndefined();
    expect(check({})).toBeUndefined();
    expect(check({ 'content-encoding': 'gzip', 'content-length': '4096' })).toBeUndefined();
    expect(check({ 'content-encoding': 'br', 'content-length': '4096' })).toBeUndefined();
  });
});
