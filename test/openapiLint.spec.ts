import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startQueryApi } from '@shopstream/query-api';
import { startTestRuntime, startTestServer, type TestServer } from '@shopstream/harness';

/**
 * The served /openapi.json and /asyncapi.json, held to what tools nobody here wrote make of them: `redocly lint`
 * with its recommended rules (and the two exceptions redocly.yaml gives with their reasons) finds no problem, and
 * the types `openapi-typescript` generates from it compile under `tsc --strict` in a client that uses them: the
 * operations by their operationId, an integer `limit`, a bulk result narrowed on `status`. spectral's
 * `spectral:asyncapi` ruleset finds no error and no warning in the AsyncAPI document but the contact one.
 */
const run = promisify(execFile);
const repo = path.resolve(import.meta.dirname, '..');
const bin = (name: string) => path.join(repo, 'test/node_modules/.bin', name);
const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-openapi-'));
let rt: Runtime;
let server: TestServer;
let docFile: string;
let asyncDocFile: string;

beforeAll(async () => {
  rt = await startTestRuntime({}, 'openapi-lint');
  server = await startTestServer(rt, [await startIngestApi(rt), await startQueryApi(rt)]);
  docFile = path.join(dir, 'openapi.json');
  writeFileSync(docFile, await (await fetch(`${server.baseUrl}/openapi.json`)).text());
  asyncDocFile = path.join(dir, 'asyncapi.json');
  writeFileSync(asyncDocFile, await (await fetch(`${server.baseUrl}/asyncapi.json`)).text());
});
afterAll(async () => {
  await server?.stop();
  await rt?.close();
  rmSync(dir, { recursive: true, force: true });
});

it('passes redocly lint (recommended rules, redocly.yaml) with no error and no warning', async () => {
  const env = { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' };
  const out = await run(bin('redocly'), ['lint', docFile, '--config', path.join(repo, 'redocly.yaml'), '--format', 'json'], {
    env,
    cwd: dir,
    timeout: 120_000,
  }).catch((e: { stdout?: string; stderr?: string }) => ({ stdout: e.stdout ?? '', stderr: e.stderr ?? '' }));
  const report = JSON.parse(out.stdout.slice(out.stdout.indexOf('{'))) as {
    totals: { errors: number; warnings: number };
    problems: { ruleId: string; message: string }[];
  };
  expect(report.problems.map((p) => `${p.ruleId}: ${p.message}`)).toEqual([]);
  expect(report.totals).toMatchObject({ errors: 0, warnings: 0 });
}, 120_000);

it('generates types with openapi-typescript that a strict client compiles against', async () => {
  const types = path.join(dir, 'api.d.ts');
  await run(bin('openapi-typescript'), [docFile, '-o', types], { cwd: dir, timeout: 120_000 });
  writeFileSync(
    path.join(dir, 'client.ts'),
    `import type { components, operations, paths } from './api.js';

type BulkItem = components['schemas']['BulkResultItem'];
export function activityIds(items: BulkItem[]): string[] {
  // Narrowed on status: event is there, not "possibly undefined".
  return items.flatMap((i) => (i.status === 'success' ? [i.event.activity_id] : []));
}
export function errorCodes(items: BulkItem[]): string[] {
  return items.flatMap((i) => (i.status === 'error' ? [i.error.code] : []));
}
export const listFlows: operations['listFlows']['parameters']['query'] = { limit: 50, status: 'active' };
export const timeline: NonNullable<operations['listContactTimeline']['parameters']['query']> = { limit: 10 };
export type CreateEvent = operations['createEvent']['requestBody']['content']['application/json'];
export const event: CreateEvent = { name: 'Placed order', metric: { metric_name: 'placed_order', value: 42 } };
export type Accepted = paths['/v2026-04/events/']['post']['responses'][202]['content']['application/json'];
export const operationIds: (keyof operations)[] = [
  'createEvent', 'createEvents', 'exportConversations', 'getActivity', 'listActivities', 'listContactTimeline',
  'createFlow', 'listFlows', 'getFlow', 'updateFlow', 'deleteFlow', 'listFlowTriggers',
];
`,
  );
  const tsc = path.join(repo, 'node_modules/.bin/tsc');
  const result = await run(
    tsc,
    [
      '--strict',
      '--noEmit',
      '--module',
      'nodenext',
      '--moduleResolution',
      'nodenext',
      '--target',
      'es2022',
      '--skipLibCheck',
      'false',
      path.join(dir, 'client.ts'),
    ],
    {
      cwd: dir,
      timeout: 120_000,
    },
  ).catch((e: { stdout?: string; code?: number }) => ({ stdout: e.stdout ?? '', code: e.code }));
  expect(result.stdout).toBe('');
}, 120_000);

it('the AsyncAPI document passes spectral lint with spectral:asyncapi: no error, no warning but the contact', async () => {
  const ruleset = path.join(dir, '.spectral.yaml');
  writeFileSync(ruleset, "extends: ['spectral:asyncapi']\n");
  const out = await run(bin('spectral'), ['lint', asyncDocFile, '--ruleset', ruleset, '--format', 'json', '--quiet'], {
    cwd: dir,
    timeout: 120_000,
  }).catch((e: { stdout?: string }) => ({ stdout: e.stdout ?? '' }));
  const results = JSON.parse(out.stdout) as { code: string; severity: number; message: string; path: string[] }[];
  // Severity 0 is an error, 1 a warning. No contact is given on purpose: the project names no mailbox or page of
  // its own to send people to. (An information, severity 2, suggests AsyncAPI 3.1; 3.0 is what the parser reads.)
  const problems = results.filter((r) => r.severity <= 1).map((r) => `${r.code} ${r.path.join('.')}: ${r.message}`);
  expect(problems).toEqual(['asyncapi-info-contact info: Info object must have "contact" object.']);
}, 120_000);
