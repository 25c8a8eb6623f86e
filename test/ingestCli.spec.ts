import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startIngestApi } from '@shopstream/ingest-api';
import { runCli, startTestRuntime, startTestServer, waitFor, type CliResult, type TestServer } from '@shopstream/harness';
import type { Runtime } from '@shopstream/runtime';

let rt: Runtime;
let server: TestServer;

beforeAll(async () => {
  rt = await startTestRuntime({ API_KEY_CACHE_TTL_MS: '200' }, 'ingest-cli');
  server = await startTestServer(rt, [await startIngestApi(rt)]);
});

afterAll(async () => {
  await server?.stop();
});

/** `pnpm -s cli api-keys ...` as an operator runs it, on this test's database; never throws, returns the exit code. */
function cli(...args: string[]): Promise<CliResult> {
  // Only the database: the command must work without Kafka, so the broker is not even given.
  return runCli(
    ['api-keys', ...args],
    { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', DATABASE_URL: rt.env.DATABASE_URL!, LOG_LEVEL: 'warn' },
    60_000,
  );
}

const postEvent = (secret: string, shopId: string) =>
  fetch(`${server.baseUrl}/v2026-04/events/`, {
    method: 'POST',
    headers: { authorization: `Bearer ${secret}`, 'x-shop-id': shopId, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'CLI key works', metric: { metric_name: 'cli_check' } }),
  });

describe('pnpm cli api-keys', () => {
  it('create prints the secret as the last line of stdout; the key records events for its shops only; list shows it; revoke ends it', async () => {
    const [s1, s2, other] = [randomUUID(), randomUUID(), randomUUID()];
    const created = await cli('create', '--shop', s1, '--shop', s2, '--name', 'cli test');
    expect(created.code).toBe(0);
    const lines = created.stdout.trimEnd().split('\n');
    const secret = lines[lines.length - 1];
    expect(secret).toMatch(/^ssk_[A-Za-z0-9_-]{43}$/);
    expect(lines.length).toBeGreaterThan(1);
    const keyId = /Created API key ([0-9a-f-]{36})/.exec(created.stdout)?.[1];
    expect(keyId).toBeDefined();

    expect((await postEvent(secret, s1)).status).toBe(202);
    expect((await postEvent(secret, s2)).status).toBe(202);
    expect((await postEvent(secret, other)).status).toBe(403);

    const listed = await cli('list');
    expect(listed.code).toBe(0);
    const [header, ...rows] = listed.stdout.trimEnd().split('\n');
    expect(header.split(/\s{2,}/)).toEqual(['ID', 'NAME', 'SHOPS', 'CREATED', 'REVOKED']);
    const row = rows.find((r) => r.startsWith(keyId!));
    expect(row?.split(/\s{2,}/)).toEqual([keyId, 'cli test', [s1, s2].sort().join(','), expect.stringMatching(/^\d{4}-\d\d-\d\dT/), '-']);

    const revoked = await cli('revoke', keyId!);
    expect(revoked.code).toBe(0);
    await waitFor(async () => (await postEvent(secret, s1)).status === 401, { timeoutMs: 60_000, message: 'revoked key refused' });
    const again = await cli('revoke', keyId!);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`No active API key with id ${keyId}`);
    const after = (await cli('list')).stdout.split('\n').find((r) => r.startsWith(keyId!));
    expect(after?.split(/\s{2,}/)[4]).toMatch(/^\d{4}-\d\d-\d\dT/);
  });

  it('rejects bad arguments with exit code 2 and says why', async () => {
    const noShop = await cli('create', '--name', 'x');
    expect([noShop.code, noShop.stdout]).toEqual([2, '']);
    expect(noShop.stderr).toContain('Give at least one --shop <uuid>.');
    const badShop = await cli('create', '--shop', 'shop-1');
    expect(badShop.code).toBe(2);
    expect(badShop.stderr).toContain('Not a shop id (a uuid): "shop-1".');
    const badId = await cli('revoke', '42');
    expect(badId.code).toBe(2);
    expect(badId.stderr).toContain('"42" is not a key id');
    const unknown = await cli('rotate');
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('Unknown api-keys command "rotate".');
  });
});
