import { failureLine } from './runCli.js';

/**
 * Makes sure the process never ends without a word: `what` (`pnpm cli migrate`) names it in the line. Call
 * `done(code)` when the command settled; until then, an event loop that runs dry (a promise nothing will
 * settle, a pause on an unref'd timer: Node would end with exit 0, or 13 under a top-level await, and say
 * nothing) and an error thrown outside the command's awaits (a driver's socket event: a stack trace) both end
 * the process with one line on stderr and exit 1.
 */
export function guardExit(what: string): { done(code: number): void } {
  let settled = false;
  const die = (line: string) => {
    settled = true;
    process.stderr.write(`${what}: ${line}\n`, () => process.exit(1));
  };
  process.on('beforeExit', () => {
    if (!settled) die('stopped before finishing: it was waiting for something that can no longer happen (a bug; nothing was done for sure)');
  });
  process.on('uncaughtException', (e) => die(failureLine(e, process.env)));
  process.on('unhandledRejection', (e) => die(failureLine(e, process.env)));
  return {
    done(code) {
      settled = true;
      // Exit once stdout is flushed: on a pipe, process.exit would cut output past the pipe's buffer.
      process.stdout.write('', () => process.exit(code));
    },
  };
}
