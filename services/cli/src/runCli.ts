import { inspect } from 'node:util';
import { Writable } from 'node:stream';
import { runCommand, type Command } from './args.js';
import { withIo, type CliIo } from './io.js';

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
  privacy: {
    load: () => import('./commands/privacy.js'),
    summary: 'privacy erase|jobs|rotate-master-key|generate-master-key: erase a person, audit jobs, rotate the master key',
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

async function dispatch(argv: string[]): Promise<number> {
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

/**
 * What a failure says: its message (a database or broker out of reach names host:port, see db.ts and
 * reach.ts), with any password of DATABASE_URL masked, wherever a driver may have quoted it.
 */
export function failureLine(e: unknown, env: NodeJS.ProcessEnv): string {
  let line = e instanceof Error ? e.message : inspect(e);
  for (const secret of passwordsIn(env.DATABASE_URL)) line = line.split(secret).join('***');
  return line;
}

function passwordsIn(url: string | undefined): string[] {
  if (!url) return [];
  try {
    const password = new URL(url).password;
    // Both spellings: as written in the URL and as the driver decodes it.
    return password ? [...new Set([password, decodeURIComponent(password)])] : [];
  } catch {
    return [];
  }
}

/**
 * `pnpm cli <argv>` on the given streams and environment; resolves with the exit code instead of exiting:
 * 0 done, 1 failed (one line on stderr says why), 2 refused as asked (usage). Never rejects.
 */
export function runCli(argv: string[], io: CliIo): Promise<number> {
  return withIo(io, async () => {
    try {
      return await dispatch(argv);
    } catch (e) {
      console.error(failureLine(e, io.env));
      return 1;
    }
  });
}

/** What a run printed and its exit code. */
export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** A stream that keeps what is written to it. */
function collector(): { stream: Writable; text: () => string } {
  const chunks: Buffer[] = [];
  const stream = new Writable({
    write(chunk: Buffer | string, _encoding, done) {
      chunks.push(Buffer.from(chunk));
      done();
    },
  });
  return { stream, text: () => Buffer.concat(chunks).toString('utf8') };
}

/** runCli in this process with exactly `env`, its output kept: what a test reads instead of spawning `pnpm cli`. */
export async function runCliCaptured(argv: string[], env: Record<string, string>): Promise<CliRun> {
  const out = collector();
  const err = collector();
  const code = await runCli(argv, { stdout: out.stream, stderr: err.stream, env });
  return { code, stdout: out.text(), stderr: err.text() };
}
