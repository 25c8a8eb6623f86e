import { execFileSync } from 'node:child_process';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '@shopstream/telemetry';
import { createBaseApp, finishApp } from './app.js';
import { listen, type RunningServer } from './server.js';

/** Real servers on ephemeral ports: what a client may take (timeouts) and whom the server believes. */
const logger = createLogger('http-spec', 'silent');
const servers: RunningServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.close(1_000);
});

async function start(
  parts: { trustProxy?: string; trustRequestId?: boolean },
  limits = { headersTimeoutMs: 1_000, requestTimeoutMs: 1_500, keepAliveTimeoutMs: 5_000, backlog: 1_000 },
) {
  const app = createBaseApp({ service: 'http-spec', logger, readiness: {}, ...parts });
  app.get('/who', (req, res) => {
    res.json({ id: req.id, ip: req.ip, protocol: req.protocol });
  });
  app.post('/body', (req, res) => {
    req.resume();
    req.on('end', () => res.json({ ok: true }));
  });
  finishApp(app);
  const s = await listen(app, 0, '127.0.0.1', logger, limits);
  servers.push(s);
  return `http://127.0.0.1:${s.port}`;
}

/**
 * Writes `request` and then nothing more: the answer the server gives a client that stalls. The server answers
 * within its 1-2 s limits; the minute is only how long a loaded machine may take before the stall counts as open.
 */
function stall(base: string, request: string): Promise<string> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(url.port), url.hostname);
    let text = '';
    const timer = setTimeout(() => (s.destroy(), reject(new Error(`still open; got ${JSON.stringify(text)}`))), 60_000);
    s.on('data', (d) => (text += d.toString('utf8')));
    s.on('close', () => (clearTimeout(timer), resolve(text)));
    s.on('error', () => undefined);
    s.write(request);
  });
}

describe('server timeouts', () => {
  let base: string;
  beforeAll(async () => {
    base = await start({});
  });

  it("listens with the configured accept backlog, not Node's 511 (a burst of connections to a busy process was dropped)", () => {
    // For a listening socket, ss shows the backlog as Send-Q.
    const port = new URL(base).port;
    const line = execFileSync('ss', ['-ltnH', `sport = :${port}`], { encoding: 'utf8' }).trim();
    expect(line.split(/\s+/)[2]).toBe('1000');
  });

  it('a body that stops arriving is answered 408 in the error body and the connection closed (it stayed open for minutes)', async () => {
    const text = await stall(base, 'POST /body HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a":');
    expect(text).toMatch(/^HTTP\/1\.1 408 /);
    const id = /x-request-id: (\S+)/i.exec(text)![1];
    expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))).toEqual({
      error: { code: 'request_timeout', message: expect.any(String), request_id: id, fields: {} },
    });
  });

  it('half-sent headers are answered 408 too', async () => {
    const text = await stall(base, 'GET /who HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    expect(text).toMatch(/^HTTP\/1\.1 408 /);
    expect(text).toContain('"code":"request_timeout"');
  });
});

describe('what Node answers itself', () => {
  it('an Expect other than 100-continue: 417 expectation_failed in the error body with a request id (it was an empty 417), on any path', async () => {
    const base = await start({});
    for (const path of ['/who', '/nothing']) {
      const text = await stall(base, `POST ${path} HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`);
      expect(text).toMatch(/^HTTP\/1\.1 417 /);
      const id = /x-request-id: (\S+)/i.exec(text)![1];
      expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))).toEqual({
        error: { code: 'expectation_failed', message: expect.any(String), request_id: id, fields: { expect: expect.any(String) } },
      });
    }
    // 100-continue is still answered by the route.
    const ok = await stall(
      base,
      'POST /body HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}',
    );
    expect(ok).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
  });
});

describe('whom the server believes', () => {
  const spoof = { 'x-forwarded-for': '203.0.113.9', 'x-forwarded-proto': 'https', 'x-request-id': 'ssk_looks_like_a_key' };

  it('by default: not X-Forwarded-* (any client could send them) nor a client X-Request-Id', async () => {
    const base = await start({});
    const res = await fetch(`${base}/who`, { headers: spoof });
    const body = (await res.json()) as any;
    expect(body.protocol).toBe('http');
    expect(body.ip).not.toBe('203.0.113.9');
    expect(body.id).not.toBe('ssk_looks_like_a_key');
    expect(res.headers.get('x-request-id')).toBe(body.id);
  });

  it('TRUST_PROXY and TRUST_REQUEST_ID set: the proxy in front is believed', async () => {
    const base = await start({ trustProxy: 'loopback', trustRequestId: true });
    const res = await fetch(`${base}/who`, { headers: spoof });
    expect(await res.json()).toEqual({ id: 'ssk_looks_like_a_key', ip: '203.0.113.9', protocol: 'https' });
    // A proxy that is not trusted (another address) is not believed.
    const other = await start({ trustProxy: '10.0.0.0/8' });
    expect(((await (await fetch(`${other}/who`, { headers: spoof })).json()) as any).protocol).toBe('http');
  });
});
