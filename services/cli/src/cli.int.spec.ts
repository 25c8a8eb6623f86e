import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, json, readTopic, startTestRuntime } from '@shopstream/harness';
import type { Runtime } from '@shopstream/runtime';
import { conversationWithMessage } from '@shopstream/testkit';
import { runCliCaptured } from './runCli.js';

/**
 * The one shape of `pnpm cli`: node:util parseArgs everywhere (`--count=3` as well as `--count 3`), unknown
 * options refused with exit 2, `<cmd> <sub> --help` about that subcommand only, and progress on stderr only on
 * a terminal or with --progress, so stdout holds the result alone. The CLI runs in this process (runCli, with
 * its own streams and environment: seconds saved per command over a tsx child) on this file's own database and
 * topics (real PostgreSQL and Kafka); exitContract.int.spec.ts runs it as a child process for the exit code.
 */
let rt: Runtime;
let dir: string;

beforeAll(async () => {
  rt = await startTestRuntime({}, 'cli-shape');
  dir = mkdtempSync(path.join(tmpdir(), 'cli-shape-'));
});

afterAll(async () => {
  await rt?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const cli = (...args: string[]) => runCliCaptured(args, cliEnv(rt));

describe('pnpm cli: one shape', () => {
  it('refuses an unknown option with exit 2, names it, and changes nothing (migrate --force)', async () => {
    const r = await cli('migrate', '--force');
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain("Unknown option '--force'");
    expect(r.stderr).toContain('Usage: pnpm cli migrate');
  });

  it('refuses unknown options in a subcommand with that subcommand’s usage only', async () => {
    const r = await cli('flows', 'list', '--shop', randomUUID(), '--all');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("Unknown option '--all'");
    expect(r.stderr).toContain('pnpm cli flows list --shop <uuid>');
    expect(r.stderr).not.toContain('pnpm cli flows create');
    const topics = await cli('topics', 'ensure', '--now');
    expect([topics.code, topics.stderr.split('\n')[0]]).toEqual([2, "Unknown option '--now'"]);
  });

  it('prints per-subcommand help for <cmd> <sub> --help, the whole group for <cmd> --help', async () => {
    const create = await cli('api-keys', 'create', '--help');
    expect(create.code).toBe(0);
    expect(create.stdout).toContain('pnpm cli api-keys create --shop <uuid>');
    expect(create.stdout).not.toContain('api-keys revoke');
    expect(create.stdout).toContain('Works on DATABASE_URL');
    const group = await cli('api-keys', '--help');
    expect(group.code).toBe(0);
    for (const sub of ['create', 'list', 'revoke']) expect(group.stdout).toContain(`pnpm cli api-keys ${sub}`);
    const rebuild = await cli('projections', 'rebuild', '-h');
    expect(rebuild.stdout).toContain('pnpm cli projections rebuild <projection>');
    expect(rebuild.stdout).not.toContain('projections status');
    const unknown = await cli('dlq', 'purge');
    expect([unknown.code, unknown.stderr.split('\n')[0]]).toEqual([2, 'Unknown dlq command "purge".']);
  });

  it('seed takes --count=3 (parseArgs), publishes, keeps stdout to the result and stderr quiet off a terminal', async () => {
    const shop = randomUUID();
    const bad = await cli('seed', 'conversations', '--shop', shop, '--count=0');
    expect([bad.code, bad.stderr.split('\n')[0]]).toEqual([2, '--count must be an integer >= 1.']);
    const r = await cli('seed', 'conversations', `--shop=${shop}`, '--count=3', '--messages=1');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^Published 3 conversations \\(6 records\\) for shop ${shop} in [\\d.]+ s\\. .*\\n$`));
    const mine = await readTopic(rt, rt.topics.conversations, (rs) => rs.filter((x) => x.key === shop).length >= 6, 120_000);
    const types = mine.filter((x) => x.key === shop).map((x) => json(x).type);
    expect(types.sort()).toEqual([
      'conversation.upserted',
      'conversation.upserted',
      'conversation.upserted',
      'message.created',
      'message.created',
      'message.created',
    ]);
  }, 180_000);

  it('conversations import shows progress on stderr with --progress, none without, and the same stdout', async () => {
    const shop = randomUUID();
    const file = path.join(dir, 'c.jsonl');
    const lines = conversationWithMessage(shop, { at: new Date().toISOString(), text: 'hello' });
    writeFileSync(file, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
    const summary = 'Published 2 record(s) to the conversations topic; 0 bad line(s) skipped.\n';

    const quiet = await cli('conversations', 'import', file);
    expect([quiet.code, quiet.stdout, quiet.stderr]).toEqual([0, summary, '']);

    const shown = await cli('conversations', 'import', file, '--progress');
    expect([shown.code, shown.stdout]).toEqual([0, summary]);
    const progress = shown.stderr.trimEnd().split('\n');
    expect(progress.at(-1)).toMatch(/^import: 0\.0 MiB of 0\.0 MiB \(100%\), 2 lines, 2 published, 0 bad$/);

    const missing = await cli('conversations', 'import');
    expect([missing.code, missing.stderr.split('\n')[0]]).toEqual([2, 'Give one file to import (or - for stdin).']);
  });
});
