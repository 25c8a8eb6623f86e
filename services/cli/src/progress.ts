import { cliIo } from './io.js';

/**
 * Progress of a long command, always on stderr so that stdout carries only the result a script reads.
 * On a terminal: one line redrawn at most every 100 ms. Elsewhere (a pipe, a log file, CI): nothing, unless
 * the command was given --progress (or shows progress by default, as `projections rebuild` does for its log),
 * then a plain line every 5 s and every line marked `always`.
 */
export interface Progress {
  /** The current state; `text` is called only when a line is due. `always` draws it now (a phase change). */
  update(text: () => string, always?: boolean): void;
  /** The last line, drawn whatever the interval, ending the redrawn line on a terminal. */
  done(text: string): void;
}

export interface ProgressOptions {
  /** Lines off a terminal too (the --progress option). */
  lines?: boolean;
  /** Where to: the run's stderr unless a test gives its own. */
  stream?: { isTTY?: boolean; write(s: string): unknown };
  /** Milliseconds between two plain lines off a terminal. */
  everyMs?: number;
  now?: () => number;
}

export const PROGRESS_OPTION = { progress: { type: 'boolean' } } as const;
export const PROGRESS_HELP = '--progress also writes progress lines to stderr when it is not a terminal (every 5 s).';

export function progress(opts: ProgressOptions = {}): Progress {
  const stream = opts.stream ?? cliIo().stderr;
  const now = opts.now ?? Date.now;
  const tty = stream.isTTY === true;
  const mode = tty ? 'redraw' : opts.lines ? 'lines' : 'off';
  const every = tty ? 100 : (opts.everyMs ?? 5_000);
  let last = -Infinity;
  const draw = (line: string, end: boolean) => {
    if (mode === 'redraw') stream.write(`\r\u001b[2K${line}${end ? '\n' : ''}`);
    else stream.write(`${line}\n`);
  };
  return {
    update(text, always = false) {
      if (mode === 'off') return;
      const t = now();
      if (!always && t - last < every) return;
      last = t;
      draw(text(), false);
    },
    done(text) {
      if (mode !== 'off') draw(text, true);
    },
  };
}
