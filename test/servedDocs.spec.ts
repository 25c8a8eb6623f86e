import http from 'node:http';
import { afterAll, describe, expect, it } from 'vitest';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startTestRuntime, startTestServer, type TestServer } from '@shopstream/harness';

/**
 * /openapi.json's servers[0] and /asyncapi.json's info.externalDocs name the origin the document was served from
 * (so /docs "Try it out" calls this server on any port), PUBLIC_BASE_URL when it is set; X-Forwarded-Proto and
 * X-Forwarded-Host count only when TRUST_PROXY trusts the peer.
 */
type Docs = { openapi: string; asyncapi: string };

/** GET both documents with the headers given (node:http: fetch will not send a Host of our choosing). */
async function docs(baseUrl: string, headers: Record<string, string> = {}): Promise<Docs> {
  const get = (path: string) =>
    new Promise<any>((resolve, reject) => {
      http
        .get(`${baseUrl}${path}`, { headers }, (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString('utf8')));
          res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(text)) : reject(new Error(`${res.statusCode} ${text}`))));
        })
        .on('error', reject);
    });
  const [openapi, asyncapi] = await Promise.all([get('/openapi.json'), get('/asyncapi.json')]);
  return { openapi: openapi.servers[0].url, asyncapi: asyncapi.info.externalDocs.url };
}

const started: { rt: Runtime; server: TestServer }[] = [];
async function serverWith(env: Record<string, string>): Promise<string> {
  const rt = await startTestRuntime(env, 'served-docs');
  const server = await startTestServer(rt, [await startIngestApi(rt)]);
  started.push({ rt, server });
  return server.baseUrl;
}
afterAll(async () => {
  for (const { rt, server } of started) {
    await server.stop();
    await rt.close();
  }
});

const forwarded = { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'api.example.com' };

describe('without PUBLIC_BASE_URL or TRUST_PROXY', () => {
  it('names the origin of the request: its port, its Host header; X-Forwarded-* ignored', async () => {
    const baseUrl = await serverWith({});
    const port = new URL(baseUrl).port;
    expect(port).not.toBe('8080');
    expect(await docs(baseUrl)).toEqual({ openapi: baseUrl, asyncapi: `${baseUrl}/docs` });
    expect(await docs(baseUrl, { host: `shopstream.internal:${port}` })).toEqual({
      openapi: `http://shopstream.internal:${port}`,
      asyncapi: `http://shopstream.internal:${port}/docs`,
    });
    expect((await docs(baseUrl, forwarded)).openapi).toBe(baseUrl);
  });
});

describe('with TRUST_PROXY', () => {
  it('names the origin the proxy says the client used', async () => {
    const baseUrl = await serverWith({ TRUST_PROXY: 'loopback' });
    expect(await docs(baseUrl, forwarded)).toEqual({ openapi: 'https://api.example.com', asyncapi: 'https://api.example.com/docs' });
    expect((await docs(baseUrl)).openapi).toBe(baseUrl);
  });
});

describe('with PUBLIC_BASE_URL', () => {
  it('names PUBLIC_BASE_URL whatever the request says', async () => {
    const baseUrl = await serverWith({ PUBLIC_BASE_URL: 'https://shopstream.example.com/', TRUST_PROXY: 'loopback' });
    expect(await docs(baseUrl, forwarded)).toEqual({ openapi: 'https://shopstream.example.com', asyncapi: 'https://shopstream.example.com/docs' });
    expect((await docs(baseUrl)).openapi).toBe('https://shopstream.example.com');
  });
});
