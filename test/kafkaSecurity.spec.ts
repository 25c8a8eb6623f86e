import { createServer, type Server } from 'node:http';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BusUnavailableError, createKafkaBus, createPlatformaticKafkaBus } from '@shopstream/bus';
import { kafkaConnection, loadEnv } from '@shopstream/config';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startActivityProjector } from '@shopstream/activity-projector';
import {
  createTestDatabase,
  freePort,
  OAUTH_SESSION_MS,
  startSecureKafka,
  testInfra,
  uniquePrefix,
  unsignedJwt,
  waitFor,
  type SecureKafkaHandle,
} from '@shopstream/testkit';
import { cliEnv, createTestShop, exitOf, json, readTopic, runCli, startTestRuntime, startTestServer } from '@shopstream/harness';
import { killShopstreams, repo, spawnShopstream } from './shopstreamProcess.js';
import { api, distributedEnv, eventsFlowAndTimeline, startShopstream, stopShopstream } from './startFlows.js';

/**
 * Kafka over SASL_SSL, as managed clusters require: a broker of this run's own whose only client listener takes
 * TLS (a CA made at test time), a client certificate (mutual TLS) and SCRAM-SHA-512 (a user made when its storage
 * was formatted) or OAUTHBEARER (tokens from a client credentials endpoint of this file, sessions ended every
 * OAUTH_SESSION_MS). The pipeline runs over it on both adapters, the CLI and `pnpm start` reach it, and a wrong
 * password, a refused client secret or an untrusted certificate is named in one line, never a hang.
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
const REFUSED =
  /^Kafka refused the SASL credentials \(KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD or the OAUTHBEARER token\): .*(SASL|[Aa]uthentication)/;
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

/**
 * An OAuth 2.0 token endpoint of this test (the client credentials grant, RFC 6749 §4.4): the client's id and secret
 * as HTTP Basic credentials, an unsigned JWT back (the secure broker's validator takes those) that lives TOKEN_SECONDS.
 */
const CLIENT_ID = 'shopstream-test-client';
const CLIENT_SECRET = `oauth-${Math.random().toString(36).slice(2)}`;
const TOKEN_SECONDS = 30;
/** Whether the endpoint now refuses every client (a rotated secret). */
const endpointMode = { refuse: false };
let tokenEndpoint: { url: string; issued: { client: string; expiresAt: number }[]; server: Server };
beforeAll(async () => {
  const issued: { client: string; expiresAt: number }[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const [id, secret] = Buffer.from((req.headers.authorization ?? '').replace(/^Basic /, ''), 'base64')
        .toString()
        .split(':')
        .map(decodeURIComponent);
      res.setHeader('content-type', 'application/json');
      if (req.method !== 'POST' || new URLSearchParams(body).get('grant_type') !== 'client_credentials') {
        res.statusCode = 400;
        res.end(JSON.stringify({ error: 'unsupported_grant_type' }));
      } else if (id !== CLIENT_ID || secret !== CLIENT_SECRET || endpointMode.refuse) {
        res.statusCode = 401;
        res.end(JSON.stringify({ error: 'invalid_client' }));
      } else {
        const exp = Math.floor(Date.now() / 1000) + TOKEN_SECONDS;
        issued.push({ client: id, expiresAt: exp * 1000 });
        res.end(JSON.stringify({ access_token: unsignedJwt({ sub: id, exp }), token_type: 'Bearer', expires_in: TOKEN_SECONDS }));
      }
    });
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  tokenEndpoint = { url: `http://127.0.0.1:${port}/oauth2/token`, issued, server };
});
afterAll(async () => {
  await new Promise((r) => tokenEndpoint?.server.close(r));
});

/** secure.env with OAUTHBEARER in place of SCRAM: mutual TLS still, tokens from the test's endpoint. */
const oauthEnv = (extra: Record<string, string> = {}) => {
  const { KAFKA_SASL_USERNAME: _u, KAFKA_SASL_PASSWORD: _p, ...tls } = secure.env;
  return {
    ...tls,
    KAFKA_SASL_MECHANISM: 'oauthbearer',
    KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL: tokenEndpoint.url,
    KAFKA_SASL_OAUTHBEARER_CLIENT_ID: CLIENT_ID,
    KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET: CLIENT_SECRET,
    // Sent with each token (Confluent Cloud names its cluster so); the broker's unsecured validator accepts any.
    KAFKA_SASL_OAUTHBEARER_EXTENSIONS: 'logicalCluster=lkc-test',
    ...extra,
  };
};

describe.each(adapters)('over SASL_SSL with OAUTHBEARER (client credentials), KAFKA_CLIENT=%s', (client) => {
  it(`an event goes in and its metric event comes out; when the broker ends the session (after ${OAUTH_SESSION_MS} ms) the clients re-authenticate, with a new token before the first (${TOKEN_SECONDS} s) ends, and events still go through after it ended`, async () => {
    const first = tokenEndpoint.issued.length;
    const rt = await startTestRuntime({ ...oauthEnv(), KAFKA_CLIENT: client }, `oauth-${client}`);
    const services = [await startIngestApi(rt), await startActivityProjector(rt)];
    const server = await startTestServer(rt, services);
    try {
      expect(tokenEndpoint.issued.length).toBeGreaterThan(first);
      const shop = await createTestShop(rt);
      const send = async (name: string) => {
        const res = await fetch(`${server.baseUrl}/v2026-04/events/`, {
          method: 'POST',
          headers: shop.headers,
          body: JSON.stringify({ name, metric: { metric_name: 'placed_order', value: 1 } }),
        });
        expect(res.status).toBe(202);
        const { activity_id: id } = (await res.json()) as { activity_id: string };
        await readTopic(rt, rt.topics.metrics, (rs) => rs.some((r) => json(r).id === id), 60_000);
      };
      await send('before the session ends');
      // The first token is kept until 15 s of it are left: a token asked for after it is asked for by a re-authentication.
      // Then wait out the first token's whole life: every session begun with it has re-authenticated, or is closed.
      const issuedBefore = tokenEndpoint.issued.length;
      const firstExpires = tokenEndpoint.issued[issuedBefore - 1].expiresAt;
      await waitFor(() => tokenEndpoint.issued.length > issuedBefore && Date.now() > firstExpires, {
        timeoutMs: 120_000,
        intervalMs: 250,
        message: 'a new token asked for, and the first expired',
      });
      await send('after re-authentication');
      expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);
    } finally {
      await server.stop();
      await rt.close();
    }
  }, 240_000);

  it('a token endpoint that starts refusing (a rotated secret): once the last token expired, publish fails naming it, /readyz 503 and ingest 503 with Retry-After; when it answers again, both recover', async () => {
    const rt = await startTestRuntime({ ...oauthEnv(), KAFKA_CLIENT: client }, `oauth-refusing-${client}`);
    const server = await startTestServer(rt, [await startIngestApi(rt)]);
    try {
      const shop = await createTestShop(rt);
      const post = () =>
        fetch(`${server.baseUrl}/v2026-04/events/`, {
          method: 'POST',
          headers: shop.headers,
          body: JSON.stringify({ name: 'Placed order', metric: { metric_name: 'placed_order' } }),
        });
      const ready = async () => (await fetch(`${server.baseUrl}/readyz`)).status;
      expect((await post()).status).toBe(202);
      endpointMode.refuse = true;
      const lastExpires = tokenEndpoint.issued.at(-1)!.expiresAt;
      const refused = await waitFor(
        async () => {
          if (Date.now() <= lastExpires) return undefined;
          const res = await post();
          return res.status === 503 ? res : undefined;
        },
        { timeoutMs: 120_000, intervalMs: 500, message: 'ingest answering 503 once the last token expired' },
      );
      expect(refused.headers.get('retry-after')).toBe('5');
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('unavailable');
      expect(await ready()).toBe(503);
      const err = await rt.bus.publish(rt.topics.events, [{ key: 'k', value: Buffer.from('{}'), headers: {} }]).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BusUnavailableError);
      expect((err as Error).message).toMatch(/OAUTHBEARER token could not be obtained|a send failed less than a second ago/);

      endpointMode.refuse = false;
      await waitFor(async () => (await post()).status === 202 && (await ready()) === 200, {
        timeoutMs: 120_000,
        intervalMs: 500,
        message: 'ingest and /readyz back once the endpoint answers again',
      });
    } finally {
      endpointMode.refuse = false;
      await server.stop();
      await rt.close();
    }
  }, 300_000);

  it('a client secret the token endpoint refuses: opening the runtime fails naming the endpoint and its answer', async () => {
    const refused = await startTestRuntime({ ...oauthEnv({ KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET: 'not-the-secret' }), KAFKA_CLIENT: client }).catch(
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(BusUnavailableError);
    expect((refused as Error).message).toMatch(
      /Kafka's SASL\/OAUTHBEARER token could not be obtained \(KAFKA_SASL_OAUTHBEARER_\*\): the OAuth token endpoint http:\/\/127\.0\.0\.1:\d+\/oauth2\/token answered 401: .*invalid_client/,
    );
    expect((refused as Error).message).not.toContain('not-the-secret');
  }, 120_000);
});

describe('pnpm start over SASL_SSL with OAUTHBEARER', () => {
  it('the all-in-one process runs the flow, its consumer thread and its large-body producer thread each making their own tokens', async () => {
    const { shop, key, env } = await distributedEnv(oauthEnv(), {
      // Bodies over 4 KiB go to the body worker and their records to the large-body producer thread.
      INGEST_LARGE_BODY_BYTES: '4096',
    });
    const s = await startShopstream(env);
    const call = api(s.base, key, shop);
    await eventsFlowAndTimeline(s.base, call);
    expect(s.output()).toContain('consumers started in a worker thread');
    const events = Array.from({ length: 60 }, (_, i) => ({ name: `Bulk ${i}`, metric: { metric_name: 'viewed_product', value: i } }));
    expect(JSON.stringify({ events }).length).toBeGreaterThan(4096);
    const bulk = await call('POST', '/events/bulk/', { events });
    expect(bulk.status).toBe(200);
    const ids = (bulk.body.results as { status: string; event: { activity_id: string } }[]).map((r) => {
      expect(r.status).toBe('success');
      return r.event.activity_id;
    });
    await waitFor(async () => (await call('GET', `/activities/${ids.at(-1)}/`)).status === 200, {
      timeoutMs: 60_000,
      message: "the large body's last activity",
    });
    const metrics = await (await fetch(`${s.base}/metrics`)).text();
    expect(Number(/^shopstream_ingest_body_worker_bodies_total (\d+)/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(1);
    expect(await stopShopstream(s)).toBe(0);
    expect(s.output()).not.toContain(CLIENT_SECRET);
  }, 300_000);
});
