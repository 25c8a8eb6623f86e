import { describe, expect, it } from 'vitest';
import { progress } from './progress.js';

/** A stream that keeps what is written, a terminal or not, and a clock the test moves. */
function setup(isTTY: boolean, lines?: boolean) {
  const written: string[] = [];
  let t = 1_000;
  const p = progress({ stream: { isTTY, write: (s: string) => written.push(s) }, lines, now: () => t });
  return { p, written, tick: (ms: number) => (t += ms) };
}

describe('progress', () => {
  it('writes nothing off a terminal unless asked for lines', () => {
    const { p, written, tick } = setup(false);
    p.update(() => 'a', true);
    tick(10_000);
    p.update(() => 'b');
    p.done('c');
    expect(written).toEqual([]);
  });

  it('with lines off a terminal: a line every 5 s, every line marked always, and the last one', () => {
    const { p, written, tick } = setup(false, true);
    p.update(() => 'first');
    tick(1_000);
    p.update(() => 'too soon');
    p.update(() => 'phase', true);
    tick(5_000);
    p.update(() => 'due');
    p.done('end');
    expect(written).toEqual(['first\n', 'phase\n', 'due\n', 'end\n']);
  });

  it('on a terminal: one line redrawn at most every 100 ms, ended by a newline', () => {
    const { p, written, tick } = setup(true);
    p.update(() => 'one');
    tick(50);
    p.update(() => 'skipped');
    tick(60);
    p.update(() => 'two');
    p.done('done');
    expect(written).toEqual(['\r\u001b[2Kone', '\r\u001b[2Ktwo', '\r\u001b[2Kdone\n']);
  });
});
