#!/usr/bin/env node
/**
 * `pnpm cli <command> ...`: each command lives in ./commands/<file>.ts and exports `command` (its summary,
 * usage and run, see ./args.ts), loaded only when it is the one asked for.
 */
import { inspect } from 'node:util';
import { runCommand, type Command } from './args.js';

const commands: Record<string, { load: () => Promise<{ command: Command }>; summary: string }> = {
  migrate: { load: () => import('./commands/migrate.js'), summary: 'apply database migrations' },
  topics: { load: () => import('./commands/topics.js'), summary: 'topics ensure: create the topics Shopstream owns, give each the retention of its role' },
  'api-keys': { load: () => import('./commands/apiKeys.js'), summary: 'api-keys create|list|revoke' },
  flows: { load: () => import('./commands/flows.js'), summary: 'flows create|list|pause|resume|delete' },
  conversations: { load: () => import('./commands/conversations.js'), summary: 'conversations import <file.jsonl|->' },
  projections: {
    load: () => import('./commands/projections.js'),
    summary: 'projections status|rebuild: where each projection stands; rebuild one without downtime',
  },
  dlq: {
    load: () => import('./commands/dlq.js'),
    summary: 'dlq list|redrive <topic>: read dead letters with their reason; send them back once the cause is fixed',
  },
  seed: { load: () => import('./commands/seed.js'), summary: 'seed conversations --shop <uuid> --count <n> [--messages <m>]' },
};

function help(): string {
  const width = Math.max(...Object.keys(commands).map((c) => c.length));
  return [
    'Usage: pnpm cli <command> [args]   (--help on each command and subcommand)',
    '',
    ...Object.entries(commands).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`),
    '',
    'Configuration comes from the environment (DATABASE_URL, KAFKA_BROKERS, ...; see the README).',
  ].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(help());
    return name ? 0 : 2;
  }
  const cmd = Object.hasOwn(commands, name) ? commands[name] : undefined;
  if (!cmd) {
    console.error(`Unknown command "${name}".\n\n${help()}`);
    return 2;
  }
  return runCommand(name, (await cmd.load()).command, rest);
}

main(process.argv.slice(2)).then(
  // Exit once stdout is flushed: on a pipe, process.exit would cut output past the pipe's buffer.
  (code) => process.stdout.write('', () => process.exit(code)),
  (e: unknown) => {
    console.error(e instanceof Error ? e.message : inspect(e));
    process.exit(1);
  },
);
