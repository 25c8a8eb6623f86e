#!/usr/bin/env node
/**
 * `pnpm cli <command> ...`: each command lives in ./commands/<file>.ts and exports `command` (its summary,
 * usage and run, see ./args.ts), loaded only when it is the one asked for; runCli.ts runs one.
 */
import { runCli, failureLine } from './runCli.js';

const argv = process.argv.slice(2);
const what = `pnpm cli${argv[0] && !argv[0].startsWith('-') ? ` ${argv[0]}` : ''}`;
let settled = false;

/** The last word of a run that went wrong outside runCli's own handling: one line, exit 1. */
function die(line: string): void {
  settled = true;
  process.stderr.write(`${line}\n`, () => process.exit(1));
}

// The event loop ran dry while the command was still waiting for something (a promise nothing will settle,
// a timer that does not hold the process): Node would end with exit 0, or 13 under a top-level await, and
// nothing said. Say so and fail.
process.on('beforeExit', () => {
  if (!settled) die(`${what}: stopped before finishing: it was waiting for something that can no longer happen (a bug; nothing was done for sure)`);
});
// A driver's error thrown outside the command's awaits (a socket event, a timer): one line instead of a stack.
process.on('uncaughtException', (e) => die(`${what}: ${failureLine(e, process.env)}`));
process.on('unhandledRejection', (e) => die(`${what}: ${failureLine(e, process.env)}`));

void runCli(argv, { stdout: process.stdout, stderr: process.stderr, env: process.env, stdin: process.stdin }).then((code) => {
  settled = true;
  // Exit once stdout is flushed: on a pipe, process.exit would cut output past the pipe's buffer.
  process.stdout.write('', () => process.exit(code));
});
