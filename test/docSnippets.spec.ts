import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Runtime } from '@shopstream/runtime';
import { serviceFactories } from '@shopstream/all-in-one';
import { createTestShop, startTestRuntime, startTestServer, type TestServer } from '@shopstream/harness';

/**
 * Docs that run: every ```sh block of README.md and docs/*.md is run with `sh -eu` against a started server,
 * with the three variables the docs use (B, KEY, SHOP) set to it, in a directory of its own (from the checkout
 * when it runs `pnpm`). A block preceded by
 * `<!-- not-run: why -->` is skipped on purpose (starting servers, the test line itself); any other block that
 * fails, a curl answered with an error status included (the snippets use `curl -f`), fails the test.
 */
const repo = path.resolve(import.meta.dirname, '..');
const files = [
  'README.md',
  ...readdirSync(path.join(repo, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

interface Snippet {
  where: string;
  code: string;
  skip: string | null;
}

function snippets(file: string): Snippet[] {
  const lines = readFileSync(path.join(repo, file), 'utf8').split('\n');
  const out: Snippet[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].trim() !== '```sh') continue;
    const start = i;
    const code: string[] = [];
    for (i++; i < lines.length && lines[i].trim() !== '```'; i++) code.push(lines[i]);
    let j = start - 1;
    while (j >= 0 && lines[j].trim() === '') j--;
    const marker = /^<!--\s*not-run:\s*(.+?)\s*-->$/.exec(lines[j]?.trim() ?? '');
    out.push({ where: `${file}:${start + 1}`, code: code.join('\n'), skip: marker?.[1] ?? null });
  }
  return out;
}

const all = files.flatMap(snippets);
let rt: Runtime;
let server: TestServer;
let env: Record<string, string>;
const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-docs-'));

beforeAll(async () => {
  rt = await startTestRuntime({ FLOW_REFRESH_MS: '500' }, 'docs');
  const started = [];
  for (const f of Object.values(serviceFactories)) started.push(await f(rt));
  server = await startTestServer(rt, started);
  const shop = await createTestShop(rt);
  env = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '',
    B: `${server.baseUrl}/v2026-04`,
    KEY: shop.key,
    SHOP: shop.shopId,
    // What `pnpm cli` needs to reach the same database and log as the server.
    DATABASE_URL: rt.env.DATABASE_URL!,
    KAFKA_BROKERS: rt.env.KAFKA_BROKERS!.join(','),
    TOPIC_PREFIX: rt.env.TOPIC_PREFIX,
    KAFKA_PARTITIONS: String(rt.env.KAFKA_PARTITIONS),
    LOG_LEVEL: 'warn',
  };
});
afterAll(async () => {
  await server?.stop();
  await rt?.close();
  rmSync(dir, { recursive: true, force: true });
});

it('finds the snippets, and every skipped one says why', () => {
  expect(all.length).toBeGreaterThan(5);
  for (const s of all) if (s.skip !== null) expect(s.skip.length, s.where).toBeGreaterThan(5);
});

describe('each sh snippet runs against a started server', () => {
  for (const s of all) {
    it.skipIf(s.skip !== null)(
      s.where,
      async () => {
        // `pnpm cli ...` runs from the checkout, as the docs assume; the rest where files they write can go.
        const cwd = /\bpnpm\b/.test(s.code) ? repo : mkdtempSync(path.join(dir, 'snippet-'));
        const result = await new Promise<{ code: number | null; out: string }>((resolve) => {
          const child = execFile('sh', ['-eu', '-c', s.code], { cwd, env: { ...env, PWD: cwd }, timeout: 180_000 });
          let out = '';
          child.stdout!.on('data', (d) => (out += d));
          child.stderr!.on('data', (d) => (out += d));
          child.on('exit', (code) => resolve({ code, out }));
        });
        expect(result.code, `${s.where} exited ${result.code}:\n${result.out.slice(-3000)}`).toBe(0);
      },
      200_000,
    );
  }
});
