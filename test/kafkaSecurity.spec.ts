import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BusUnavailableError, createKafkaBus, createPlatformaticKafkaBus } from '@shopstream/bus';
import { kafkaConnection, loadEnv } from '@shopstream/config';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startActivityProjector } from '@shopstream/activity-projector';
import { createTestDatabase, startSecureKafka, testInfra, uniquePrefix, type SecureKafkaHandle } from '@shopstream/testkit';
import { cliEnv, createTestShop, exitOf, json, readTopic, runCli, startTestRuntime, startTestServer } from '@shopstream/harness';
import { killShopstreams, repo, spawnShopstream } from './shopstreamProcess.js';

/**
 * Kafka over SASL_SSL, as managed clusters require: a broker of this run's own whose only client listener takes
 * TLS (a CA made at test time), a client certificate (mutual TLS) and SCRAM-SHA-512 (a user made when its storage
 * was formatted). The pipeline runs over it on both adapters, the CLI reaches it, and a wrong password or an
 * untrusted certificate is named in one line, never a hang.
 */
let secure: SecureKafkaHandle;
beforeAll(async () => {
  secure = await startSecureKafka();
}, 180_000);
afterAll(async () => {
  killShopstreams();
  await secure?.stop();
});

const adapters = ['kafkajs', 'platformatic'] as const;
const REFUSED = /^Kafka refused the SASL credentials \(KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD\): .*(SASL|[Aa]uthentication)/;
const UNTRUSTED = /^Kafka's TLS certificate is not trusted \((?:[A-Z_]+: )?.*certificate.*\): set KAFKA_SSL_CA_FILE to the CA that signed it$/;

describe.each(adapters)('over SASL_SSL (SCRAM-SHA-512, mutual TLS), KAFKA_CLIENT=%s', (client) => {
  let rt: Runtime;
  afterAll(async () => {
    await rt?.close();
  });

  it('an event goes in over HTTP, the activity projector writes it, and its metric event comes out on `metrics`', async () => {
    rt = await startTestRuntime({ ...secure.env, KAFKA_CLIENT: client }, `sasl-${client}`);
    expect(rt.env.KAFKA_BROKERS).toEqual(secure.brokers);
    const services = [await startIngestApi(rt), await startActivityProjector(rt)];
    const server = await startTestServer(rt, services);
    try {
      const shop = await createTestShop(rt);
      expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);
      const res = await fetch(`${server.baseUrl}/v2026-04/events/`, {
        method: 'POST',
        headers: shop.headers,
        body: JSON.stringify({ name: 'Placed order', metric: { metric_name: 'placed_order', value: 12.5 } }),
      });
      expect(res.status).toBe(202);
      const { activity_id: id } = (await res.json()) as { activity_id: string };
      const records = await readTopic(rt, rt.topics.metrics, (rs) => rs.some((r) => json(r).id === id), 60_000);
      const metric = records.find((r) => json(r).id === id)!;
      expect(metric.key).toBe(shop.shopId);
      expect(json(metric)).toMatchObject({ id, shop_id: shop.shopId, metric_name: 'placed_order', value: 12.5 });
    } finally {
      await server.stop();
    }
  }, 120_000);
});

describe('a wrong password or an untrusted certificate', () => {
  const envWith = (extra: Record<string, string>) => loadEnv({ ...secure.env, ...extra });

  it.each(adapters)(
    '%s: the bus answers ping false and publish BusUnavailableError naming the refused credentials; a service of it answers /readyz 503 and ingest 503 with Retry-After',
    async (client) => {
      const rt = await startTestRuntime({}, `wrong-${client}`);
      const create = client === 'kafkajs' ? createKafkaBus : createPlatformaticKafkaBus;
      const bus = await create({
        brokers: secure.brokers,
        clientId: `wrong-${client}`,
        replicationFactor: 1,
        logger: rt.logger,
        security: kafkaConnection(envWith({ KAFKA_SASL_PASSWORD: 'not-the-password' })),
        // No timer of the bus's may answer first, however loaded the machine: only the broker's refusal.
        publishTimeoutMs: 30_000,
        stallMs: 30_000,
      });
      // The runtime of a process whose credentials stopped working after it started (rotated): its bus is refused.
      const refused: Runtime = { ...rt, bus };
      const server = await startTestServer(refused, [await startIngestApi(refused)]);
      try {
        expect(await bus.ping()).toBe(false);
        const record = { key: 'k', value: Buffer.from('{}'), headers: {} };
        const err = await bus.publish(rt.topics.events, [record]).then(
          () => null,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(BusUnavailableError);
        expect((err as Error).message).toMatch(/^Kafka did not take the records: Kafka refused the SASL credentials/);
        // Refused for its credentials: a publish within the next second is answered at once (or, if the machine held
        // this line past that second, tries and is refused again), never held.
        const again = await bus.publish(rt.topics.events, [record]).catch((e: unknown) => e);
        expect(again).toBeInstanceOf(BusUnavailableError);
        expect((again as Error).message).toMatch(/a send failed less than a second ago|Kafka refused the SASL credentials/);

        const shop = await createTestShop(rt);
        expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(503);
        const res = await fetch(`${server.baseUrl}/v2026-04/events/`, {
          method: 'POST',
          headers: shop.headers,
          body: JSON.stringify({ name: 'lost', metric: { metric_name: 'lost' } }),
        });
        expect(res.status).toBe(503);
        expect(res.headers.get('retry-after')).toBe('5');
        expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unavailable');
      } finally {
        await server.stop();
        await bus.close();
        await rt.close();
      }
    },
    60_000,
  );

  it.each(adapters)(
    '%s: opening the runtime fails with the cause in one sentence, for a refused password and for an untrusted CA',
    async (client) => {
      const refused = await startTestRuntime({ ...secure.env, KAFKA_CLIENT: client, KAFKA_SASL_PASSWORD: 'not-the-password' }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(BusUnavailableError);
      expect((refused as Error).message).toMatch(REFUSED);
      const untrusted = await startTestRuntime({ ...secure.env, KAFKA_CLIENT: client, KAFKA_SSL_CA_FILE: secure.otherCaFile }).catch((e: unknown) => e);
      expect(untrusted).toBeInstanceOf(BusUnavailableError);
      expect((untrusted as Error).message).toMatch(UNTRUSTED);
    },
    120_000,
  );

  it('a service started with a wrong password logs the cause at each attempt and exits 1 after STARTUP_TIMEOUT_MS with it, no password in its output', async () => {
    const s = spawnShopstream([process.execPath, '--conditions=@shopstream/source', '--import', 'tsx', path.join(repo, 'services/ingest-api/src/main.ts')], {
      ...secure.env,
      KAFKA_SASL_PASSWORD: 'wrong-s3cret',
      DATABASE_URL: await createTestDatabase(testInfra().databaseUrl),
      TOPIC_PREFIX: uniquePrefix(),
      // Long enough for a first attempt to be refused however loaded the machine (one takes about 1.5 s when idle).
      STARTUP_TIMEOUT_MS: '15000',
      LOG_LEVEL: 'warn',
    });
    const { code } = await exitOf(s.child, { timeoutMs: 90_000, message: 'the service exits' });
    const out = s.output();
    expect(code, out).toBe(1);
    expect(out).not.toContain('wrong-s3cret');
    const lines = out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: number; msg: string });
    // Each attempt: the client's first refusal and the attempt's line, both naming the cause; nothing else above info.
    const attempts = lines.filter((l) => l.msg.startsWith('could not open ')).length;
    expect(attempts).toBeGreaterThanOrEqual(1);
    const loud = lines.filter((l) => l.level >= 40 && l.level < 60);
    expect(loud.filter((l) => !l.msg.includes('Kafka refused the SASL credentials')).map((l) => l.msg)).toEqual([]);
    expect(loud.length).toBeLessThanOrEqual(2 * attempts);
    const last = lines.at(-1)!;
    expect(last.level).toBe(60);
    expect(last.msg).toMatch(
      /^could not start: could not reach .*Kafka at 127\.0\.0\.1:\d+ within STARTUP_TIMEOUT_MS=15000 \(Kafka refused the SASL credentials/,
    );
  }, 120_000);
});

describe('the CLI over SASL_SSL', () => {
  it('`topics ensure` reaches the broker with the same settings', async () => {
    const rt = await startTestRuntime({ ...secure.env }, 'sasl-cli');
    try {
      const r = await runCli(['topics', 'ensure'], cliEnv(rt, secure.env));
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain(`Kafka at ${secure.brokers[0]}`);
    } finally {
      await rt.close();
    }
  }, 120_000);
});
