import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShopstreamClient, ShopstreamTimeoutError, type EventInput } from './index.js';

/**
 * Against a server that never answers: a TCP listener that takes connections and the request bytes and sends
 * nothing back. Every bound of the client (per attempt, per call, on flush and close) must end the wait; the
 * test would otherwise hang until vitest's own timeout.
 */
describe('against a server that never answers', () => {
  const sockets = new Set<net.Socket>();
  const silent = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.resume();
  });
  let baseUrl = '';
  beforeAll(async () => {
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    baseUrl = `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => silent.close(r));
  });
  const client = (extra: Partial<ConstructorParameters<typeof ShopstreamClient>[0]> = {}) =>
    new ShopstreamClient({ baseUrl, apiKey: 'k', shopId: '00000000-0000-4000-8000-000000000000', minBackoffMs: 1, maxBackoffMs: 1, ...extra });
  const event: EventInput = { name: 'e', metric: { metric_name: 'm' } };

  it('each attempt ends at timeoutMs and is retried; the last one rejects with a ShopstreamTimeoutError', async () => {
    // Attempts as the client makes them (undici may hold a request back on a spare connection it then drops).
    let attempts = 0;
    const counting: typeof fetch = (input, init) => (attempts++, fetch(input, init));
    const e = await client({ timeoutMs: 100, retries: 2, fetch: counting })
      .recordEvent(event)
      .catch((err: unknown) => err);
    expect(e).toBeInstanceOf(ShopstreamTimeoutError);
    expect(e).toMatchObject({ timeoutMs: 100, message: 'POST /v2026-04/events/ got no answer within 100 ms' });
    expect(attempts).toBe(3);
  });

  it('a per-call timeoutMs overrides the client one', async () => {
    const e = await client({ timeoutMs: 600_000, retries: 0 })
      .getActivity('x', { timeoutMs: 50 })
      .catch((err: unknown) => err);
    expect(e).toMatchObject({ name: 'ShopstreamTimeoutError', timeoutMs: 50 });
  });

  it("the caller's signal ends the call at once, without a retry", async () => {
    let attempts = 0;
    const counting: typeof fetch = (input, init) => (attempts++, fetch(input, init));
    const controller = new AbortController();
    const pending = client({ timeoutMs: 600_000, retries: 5, fetch: counting }).recordEvent(event, { signal: controller.signal });
    await waitUntil(() => attempts > 0);
    controller.abort(new Error('gave up by hand'));
    await expect(pending).rejects.toThrow('gave up by hand');
    expect(attempts).toBe(1);
  });

  it('close({ timeoutMs }) resolves while the request still hangs, and reports the batch to onError', async () => {
    const failed: { error: Error; events: EventInput[] }[] = [];
    const c = client({ timeoutMs: 600_000, onError: (error, events) => failed.push({ error, events }) });
    c.track(event);
    c.track({ ...event, name: 'f' });
    await c.close({ timeoutMs: 100 });
    expect(failed).toHaveLength(1);
    expect(failed[0].error).toBeInstanceOf(ShopstreamTimeoutError);
    expect(failed[0].error.message).toBe('close() got no answer within 100 ms');
    expect(failed[0].events.map((e) => e.name)).toEqual(['e', 'f']);
    // The key each unkeyed event got is in what onError receives: resending those events replays them.
    expect(failed[0].events.every((e) => typeof e.metric.deduping_key === 'string')).toBe(true);
  });

  it('flush({ timeoutMs }) gives up on the batches sent before it; the client keeps working afterwards', async () => {
    const failed: EventInput[][] = [];
    const c = client({ timeoutMs: 600_000, flushAt: 1, onError: (_e, events) => failed.push(events) });
    c.track(event);
    c.track({ ...event, name: 'f' });
    await c.flush({ timeoutMs: 50 });
    expect(failed.map((b) => b.map((e) => e.name))).toEqual([['e'], ['f']]);
    c.track({ ...event, name: 'g' });
    await c.close({ timeoutMs: 50 });
    expect(failed.map((b) => b.map((e) => e.name))).toEqual([['e'], ['f'], ['g']]);
  });

  it('track() holds at most maxQueueSize undelivered events and gives the others to onDrop', async () => {
    const dropped: string[] = [];
    const c = client({ timeoutMs: 600_000, flushAt: 2, maxQueueSize: 3, onError: () => {}, onDrop: (e) => dropped.push(e.name) });
    for (const name of ['a', 'b', 'c', 'd', 'e']) c.track({ ...event, name });
    // a and b are in a flush that hangs, c is queued: d and e find 3 waiting.
    expect(dropped).toEqual(['d', 'e']);
    await c.flush({ timeoutMs: 50 });
    // Reported to onError, a, b and c no longer wait: there is room again.
    c.track({ ...event, name: 'f' });
    expect(dropped).toEqual(['d', 'e']);
    await c.close({ timeoutMs: 50 });
  });
});

async function waitUntil(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((r) => setTimeout(r, 5));
}

/**
 * A rate-limited walk, against a local server answering as the API does (test/client.spec.ts sees the real
 * export's 429): a 429 with Retry-After is waited out, at least as long as it says, and the walk goes on where it was.
 */
describe('against a rate-limited export', () => {
  const seen: { path: string; at: number; status: number }[] = [];
  let limitedOnce = false;
  const server = http.createServer((req, res) => {
    const page = Number(new URL(req.url!, 'http://x').searchParams.get('page') ?? '1');
    const answer = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      seen.push({ path: req.url!, at: performance.now(), status });
      res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
    };
    if (page === 2 && !limitedOnce) {
      limitedOnce = true;
      return answer(
        429,
        { error: { code: 'rate_limited', message: 'At most 2 requests per 60 seconds.', request_id: 'r-429', fields: {} } },
        { 'retry-after': '1' },
      );
    }
    const next = page < 3 ? `${baseUrl}/v2026-04/conversations/export/?page=${page + 1}` : null;
    answer(200, { results: [{ id: `c${page}` }], next });
  });
  let baseUrl = '';
  beforeAll(async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    baseUrl = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
  });

  it('walks the export to its end, waiting out the 429 for its Retry-After', async () => {
    const c = new ShopstreamClient({ baseUrl, apiKey: 'k', shopId: '00000000-0000-4000-8000-000000000000', minBackoffMs: 1, maxBackoffMs: 1 });
    const ids: string[] = [];
    for await (const conv of c.exportConversations({ limit: 1 })) ids.push(conv.id);
    expect(ids).toEqual(['c1', 'c2', 'c3']);
    expect(seen.map((s) => s.status)).toEqual([200, 429, 200, 200]);
    // Waited at least the Retry-After (a slow machine only waits longer), not the 1 ms backoff.
    expect(seen[2].at - seen[1].at).toBeGreaterThanOrEqual(950);
  });

  it('with no retries left, the 429 is the error, with its code', async () => {
    limitedOnce = false;
    seen.length = 0;
    const c = new ShopstreamClient({ baseUrl, apiKey: 'k', shopId: '00000000-0000-4000-8000-000000000000', retries: 0 });
    const walk = async () => {
      for await (const _ of c.exportConversations({ limit: 1 }));
    };
    await expect(walk()).rejects.toMatchObject({ status: 429, code: 'rate_limited', requestId: 'r-429' });
  });
});
