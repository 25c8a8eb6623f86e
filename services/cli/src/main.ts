#!/usr/bin/env node
/**
 * `pnpm cli <command> ...`: each command lives in ./commands/<file>.ts and exports `command` (its summary,
 * usage and run, see ./args.ts), loaded only when it is the one asked for; runCli.ts runs one.
 */
import { guardExit } from './exitGuard.js';
import { runCli } from './runCli.js';

const argv = process.argv.slice(2);
const exit = guardExit(`pnpm cli${argv[0] && !argv[0].startsWith('-') ? ` ${argv[0]}` : ''}`);
void runCli(argv, { stdout: process.stdout, stderr: process.stderr, env: process.env, stdin: process.stdin }).then((code) => exit.done(code));
