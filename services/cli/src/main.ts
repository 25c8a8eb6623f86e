#!/usr/bin/env node
/**
 * `pnpm cli <command> ...`: each command lives in ./commands/<file>.ts and exports
 * `run(args: string[]): Promise<number>` (the exit code) and `usage: string`.
 */
import { inspect } from 'node:util';

const commands: Record<string, { file: string; summary: string }> = {
  migrate: { file: './commands/migrate.js', summary: 'apply database migrations' },
  topics: { file: './commands/topics.js', summary: 'topics ensure: create the topics Shopstream owns, give each the retention of its role' },
  'api-keys': { file: './commands/apiKeys.js', summary: 'api-keys create|list|revoke' },
  flows: { file: './commands/flows.js', summary: 'flows create|list|pause|resume|delete' },
  conversations: { file: './commands/conversations.js', summary: 'conversations import <file.jsonl|->' },
  projections: { file: './commands/projections.js', summary: 'projections status|rebuild: where each projection stands; rebuild one without downtime' },
  dlq: { file: './commands/dlq.js', summary: 'dlq list|redrive <topic>: read dead letters with their reason; send them back once the cause is fixed' },
  seed: { file: './commands/seed.js', summary: 'seed conversations --shop <uuid> --count <n> [--messages <m>]' },
};

function help(): string {
  const width = Math.max(...Object.keys(commands).map((c) => c.length));
  return [
    'Usage: pnpm cli <command> [args]   (--help on each command)',
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
  const cmd = commands[name];
  if (!cmd) {
    console.error(`Unknown command "${name}".\n\n${help()}`);
    return 2;
  }
  const mod = (await import(cmd.file)) as { run(args: string[]): Promise<number>; usage: string };
  if (rest.includes('--help') || rest.includes('-h')) {
    console.log(mod.usage);
    return 0;
  }
  return mod.run(rest);
}

main(process.argv.slice(2)).then(
  // Exit once stdout is flushed: on a pipe, process.exit would cut output past the pipe's buffer.
  (code) => process.stdout.write('', () => process.exit(code)),
  (e: unknown) => {
    console.error(e instanceof Error ? e.message : inspect(e));
    process.exit(1);
  },
);
