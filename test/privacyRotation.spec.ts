import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { rebuildProjection } from '@shopstream/projections';
import { sql } from '@shopstream/db';
import type { Runtime } from '@shopstream/runtime';
import { serviceFactories } from '@shopstream/all-in-one';
import { activityProjection } from '@shopstream/activity-projector';
import { runCliCaptured } from '@shopstream/cli';
import { createTestShop, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';

/**
 * Issue 24, the master key's rotation as docs/privacy.md tells an operator to run it: the new key first and the
 * old one after it, `pnpm cli privacy rotate-master-key`, then the old key dropped. What must hold: every data
 * key is re-wrapped under the new key, the log is not rewritten and stays readable with the new key alone (a
 * rebuild after the old key is gone brings every event back, names and all), and a rotation run without the key
 * the data keys are under refuses, naming it, rather than destroying anything.
 */
const masterKey = () => randomBytes(32).toString('base64');
/** A master key's name as contact_keys records it: the first 16 hex digits of its SHA-256 (docs/privacy.md). */
const fingerprintOf = (key: string) => createHash('sha256').update(Buffer.from(key, 'base64')).digest('hex').slice(0, 16);
const [A, B, stranger] = [masterKey(), masterKey(), masterKey()];

let rt: Runtime;
let server: TestServer;
let shop: Awaited<ReturnType<typeof createTestShop>>;

beforeAll(async () => {
  rt = await startTestRuntime({ PRIVACY_MASTER_KEY: A }, 'rotation');
  server = await startTestServer(rt, [await serviceFactories['ingest-api'](rt), await serviceFactories['activity-projector'](rt)]);
  shop = await createTestShop(rt);
});
afterAll(async () => {
  await server?.stop();
  await rt?.close();
});

/** `pnpm cli privacy …` in this process on the test's database, with these master keys. */
const privacyCli = (keys: string, ...args: string[]) =>
  runCliCaptured(['privacy', ...args], { DATABASE_URL: rt.env.DATABASE_URL!, PRIVACY_MASTER_KEY: keys, LOG_LEVEL: 'warn' });

const mastersOfShop = async () =>
  (await rt.db.query(sql`SELECT DISTINCT master_id FROM contact_keys WHERE shop_id = ${shop.shopId} ORDER BY master_id`)).map((r) => String(r.master_id));

const namesOf = async (ids: string[]) =>
  (await rt.db.query(sql`SELECT name FROM activities WHERE shop_id = ${shop.shopId} AND id = ANY(${ids}::uuid[]) ORDER BY name`)).map((r) => String(r.name));

it('re-wraps every data key under the new master key; the log then reads with the new key alone; without the old key it refuses', async () => {
  const events = ['Placed order', 'Opened email', 'Viewed product'].map((name, i) => ({
    name,
    metric: { metric_name: 'rotation_check', additional_properties: { i } },
    contact: { email: `rotated-${i}@example.com` },
  }));
  const res = await fetch(`${server.baseUrl}/v2026-04/events/bulk/`, { method: 'POST', headers: shop.headers, body: JSON.stringify({ events }) });
  expect(res.status).toBe(200);
  const ids = ((await res.json()) as { results: { event: { activity_id: string } }[] }).results.map((r) => r.event.activity_id);
  await waitFor(async () => (await namesOf(ids)).length === 3, { timeoutMs: 60_000, message: 'the three activities projected' });
  expect(await mastersOfShop()).toEqual([fingerprintOf(A)]);

  // Without the key the data keys are under, nothing is re-wrapped: the command fails and names the key it lacks.
  const refused = await privacyCli(stranger, 'rotate-master-key');
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain(fingerprintOf(A));
  expect(await mastersOfShop()).toEqual([fingerprintOf(A)]);

  // Step 2 of the docs: the new key first, the old one after it.
  const rotated = await privacyCli(`${B},${A}`, 'rotate-master-key');
  expect(rotated.code).toBe(0);
  expect(rotated.stdout).toMatch(new RegExp(`^Re-wrapped \\d+ data keys and \\d+ job identifiers under master key ${fingerprintOf(B)}\\.$`, 'm'));
  expect(Number(/Re-wrapped (\d+) data keys/.exec(rotated.stdout)?.[1])).toBeGreaterThanOrEqual(3);
  expect(await mastersOfShop()).toEqual([fingerprintOf(B)]);
  // A second run finds nothing left to do.
  expect((await privacyCli(`${B},${A}`, 'rotate-master-key')).stdout).toMatch(/^Re-wrapped 0 data keys/m);

  // Step 3: the old key dropped. A rebuild with the new key alone opens every sealed record again.
  await rt.db.query(sql`UPDATE activities SET name = 'overwritten' WHERE shop_id = ${shop.shopId} AND id = ANY(${ids}::uuid[])`);
  await rebuildProjection(activityProjection, {
    bus: rt.bus,
    db: rt.db,
    logger: rt.logger,
    topics: rt.topics,
    groupPrefix: rt.env.CONSUMER_GROUP_PREFIX,
    env: { PRIVACY_MASTER_KEY: B },
  });
  expect(await namesOf(ids)).toEqual(['Opened email', 'Placed order', 'Viewed product']);
});
