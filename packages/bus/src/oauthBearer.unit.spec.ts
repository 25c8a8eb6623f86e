import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registry } from '@shopstream/telemetry';
import { jwtExpiryMs, oauthBearerTokens, OAuthBearerTokenError } from './kafka/oauthBearer.js';

/** shopstream_kafka_oauth_token_requests_total of an outcome. */
async function requested(outcome: 'ok' | 'failed'): Promise<number> {
  const m = registry.getSingleMetric('shopstream_kafka_oauth_token_requests_total');
  return (await m?.get())?.values.find((v) => v.labels.outcome === outcome)?.value ?? 0;
}

const jwt = (claims: object) => `${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.`;

/** A token endpoint on a local port: answers what `next` says, and records each request. */
let server: Server;
let url: string;
const requests: { authorization?: string; body: string }[] = [];
let next: () => { status: number; body: object } = () => ({ status: 200, body: {} });
beforeAll(async () => {
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      requests.push({ authorization: req.headers.authorization, body });
      const { status, body: answer } = next();
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/token`;
});
afterAll(async () => {
  await new Promise((r) => server.close(r));
});

describe('oauthBearerTokens from a token endpoint', () => {
  it('asks with the client credentials grant, keeps the token until 80 % of expires_in, and shares one request among concurrent callers', async () => {
    requests.length = 0;
    let n = 0;
    next = () => ({ status: 200, body: { access_token: `token-${++n}`, token_type: 'Bearer', expires_in: 100 } });
    let clock = 1_000_000;
    const tokens = oauthBearerTokens({ tokenEndpointUrl: url, clientId: 'id:1', clientSecret: 's&cret', scope: 'kafka' }, () => clock);

    expect(await Promise.all([tokens(), tokens(), tokens()])).toEqual(['token-1', 'token-1', 'token-1']);
    expect(requests).toHaveLength(1);
    expect(Buffer.from(requests[0].authorization!.replace('Basic ', ''), 'base64').toString()).toBe('id%3A1:s%26cret');
    expect(Object.fromEntries(new URLSearchParams(requests[0].body))).toEqual({ grant_type: 'client_credentials', scope: 'kafka' });

    clock += 79_000;
    expect(await tokens()).toBe('token-1');
    clock += 2_000;
    expect(await tokens()).toBe('token-2');
    expect(requests).toHaveLength(2);
  });

  it('without expires_in, keeps a JWT until 80 % of the life its exp gives, or until 15 s of it are left', async () => {
    let clock = 2_000_000_000_000;
    next = () => ({ status: 200, body: { access_token: jwt({ sub: 'x', exp: (clock + 50_000) / 1000 }) } });
    expect(jwtExpiryMs(jwt({ exp: 12 }))).toBe(12_000);
    expect(jwtExpiryMs('opaque')).toBeUndefined();
    requests.length = 0;
    const tokens = oauthBearerTokens({ tokenEndpointUrl: url, clientId: 'c', clientSecret: 's' }, () => clock);
    // 80 % of a 50 s life would be 40 s; 15 s before its end, 35 s, comes first.
    const first = await tokens();
    clock += 34_000;
    expect(await tokens()).toBe(first);
    clock += 2_000;
    await tokens();
    expect(requests).toHaveLength(2);
  });

  it('a refusal is an OAuthBearerTokenError naming the endpoint and its answer, and the next call asks again', async () => {
    next = () => ({ status: 401, body: { error: 'invalid_client' } });
    const tokens = oauthBearerTokens({ tokenEndpointUrl: url, clientId: 'c', clientSecret: 'wrong' });
    const [failedBefore, okBefore] = [await requested('failed'), await requested('ok')];
    const err = await tokens().catch((e: unknown) => e);
    expect(await requested('failed')).toBe(failedBefore + 1);
    expect(err).toBeInstanceOf(OAuthBearerTokenError);
    expect((err as Error).message).toBe(`the OAuth token endpoint ${url} answered 401: {"error":"invalid_client"}`);
    next = () => ({ status: 200, body: { access_token: 'after', expires_in: 60 } });
    expect(await tokens()).toBe('after');
    expect(await requested('ok')).toBe(okBefore + 1);
    next = () => ({ status: 200, body: { token_type: 'Bearer' } });
    await expect(oauthBearerTokens({ tokenEndpointUrl: url, clientId: 'c', clientSecret: 's' })()).rejects.toThrow(/answered without an access_token/);
  });

  it('while the endpoint fails, hands out the token held until 10 s of it are left, asking again each time', async () => {
    let clock = 3_000_000;
    next = () => ({ status: 200, body: { access_token: 'held', expires_in: 100 } });
    requests.length = 0;
    const tokens = oauthBearerTokens({ tokenEndpointUrl: url, clientId: 'c', clientSecret: 's' }, () => clock);
    expect(await tokens()).toBe('held');
    next = () => ({ status: 503, body: { error: 'temporarily_unavailable' } });
    clock += 81_000;
    expect(await tokens()).toBe('held');
    clock += 8_000;
    expect(await tokens()).toBe('held');
    expect(requests).toHaveLength(3);
    clock += 2_000;
    await expect(tokens()).rejects.toThrow(/answered 503/);
    next = () => ({ status: 200, body: { access_token: 'renewed', expires_in: 100 } });
    expect(await tokens()).toBe('renewed');
  });

  it('an endpoint that cannot be reached is named too', async () => {
    const tokens = oauthBearerTokens({ tokenEndpointUrl: 'http://127.0.0.1:1/token', clientId: 'c', clientSecret: 's' });
    await expect(tokens()).rejects.toThrow(/^the OAuth token endpoint http:\/\/127\.0\.0\.1:1\/token could not be reached/);
  });
});

describe('oauthBearerTokens from a file', () => {
  it('reads the file, again after 30 s (or sooner, before its JWT expires), and names an empty or missing one', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'oauth-file-'));
    try {
      const file = path.join(dir, 'token');
      let clock = 5_000_000;
      const tokens = oauthBearerTokens({ tokenFile: file }, () => clock);
      await expect(tokens()).rejects.toThrow(/KAFKA_SASL_OAUTHBEARER_TOKEN_FILE=.* cannot be read: ENOENT/);
      await writeFile(file, 'first\n');
      expect(await tokens()).toBe('first');
      await writeFile(file, 'second');
      clock += 29_000;
      expect(await tokens()).toBe('first');
      clock += 2_000;
      expect(await tokens()).toBe('second');
      // A JWT that expires in 25 s is read again once 15 s of it are left, after 10.
      clock += 31_000;
      await writeFile(file, jwt({ exp: (clock + 25_000) / 1000 }));
      const short = await tokens();
      expect(jwtExpiryMs(short)).toBe(clock + 25_000);
      await writeFile(file, '');
      clock += 9_000;
      expect(await tokens()).toBe(short);
      // Due again, and the file is empty: the token held while 10 s of it are left, then the failure.
      clock += 2_000;
      expect(await tokens()).toBe(short);
      clock += 5_000;
      await expect(tokens()).rejects.toThrow(/is empty/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
