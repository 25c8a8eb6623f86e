import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium } from 'playwright-core';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { projectionDefinitions, services } from '@shopstream/all-in-one';
import { ChromiumUnavailableError, ensureChromium } from '@shopstream/testkit';
import { createTestShop, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';

/**
 * GET /status and /status.json on a Shopstream running every service on real Kafka and PostgreSQL: the same
 * figures as `pnpm cli projections status`, this process's ingest answers by status, its consumers; no shop's
 * data; STATUS_TOKEN when set. The page itself in Debian's chromium, driven by playwright-core.
 * `SHOPSTREAM_UPDATE_SCREENSHOT=1` copies the screenshot to docs/status-page.png.
 */
let rt: Runtime;
let server: TestServer;
let shop: Awaited<ReturnType<typeof createTestShop>>;
const started: StartedService[] = [];

beforeAll(async () => {
  rt = await startTestRuntime({}, 'status');
  for (const s of services) started.push(await s.start(rt));
  server = await startTestServer(rt, started, projectionDefinitions(rt.env));
  shop = await createTestShop(rt);
  // Five accepted events, one refused key, and one record no schema accepts: a dead letter.
  for (let i = 0; i < 5; i++) {
    const res = await fetch(`${server.baseUrl}/v2026-04/events/`, {
      method: 'POST',
      headers: shop.headers,
      body: JSON.stringify({ name: 'Placed order', metric: { metric_name: 'placed_order', value: i }, contact: { email: `ada${i}@example.com` } }),
    });
    expect(res.status).toBe(202);
  }
  const refused = await fetch(`${server.baseUrl}/v2026-04/events/`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  expect(refused.status).toBe(401);
  await rt.bus.publish(rt.topics.events, [{ key: shop.shopId, value: '{"not": "an event record"}' }]);
});
afterAll(async () => {
  await server?.stop();
  for (const s of started.reverse()) await s.stop();
  await rt?.close();
});

const statusJson = async (base = server.baseUrl) => (await fetch(`${base}/status.json`)).json() as Promise<any>;

describe('/status.json', () => {
  it("reports each projection's lag, last applied time, dead letters and rebuild, the ingest answers and the consumers", async () => {
    const s = await waitFor(
      async () => {
        const doc = await statusJson();
        const activity = doc.projections?.find((p: any) => p.projection === 'activity-projector');
        const flows = doc.projections?.find((p: any) => p.projection === 'flow-matcher');
        return activity?.deadLetters === 1 && activity.lag === 0 && flows?.lag === 0 && flows.lastAppliedAt !== null ? doc : undefined;
      },
      { message: 'the dead letter and every event applied, on /status.json' },
    );
    expect(s.service).toBe('test');
    expect(s.projections.map((p: any) => p.projection)).toEqual(['activity-projector', 'flow-matcher', 'conversation-projector']);
    const activity = s.projections[0];
    expect(activity).toMatchObject({
      group: `${rt.env.CONSUMER_GROUP_PREFIX}activity-projector`,
      topic: rt.topics.events,
      lag: 0,
      deadLetters: 1,
      rebuild: null,
    });
    expect(Date.parse(activity.lastAppliedAt)).toBeGreaterThan(Date.now() - 600_000);
    // Six records (five events, the dead letter) over the partitions' checkpoints.
    expect(activity.partitions.reduce((n: number, p: any) => n + Number(p.logEnd), 0)).toBe(6);
    expect(s.projections[2]).toMatchObject({ projection: 'conversation-projector', lag: 0, lastAppliedAt: null, deadLetters: 0 });

    expect(s.ingest.bucketSeconds).toBe(10);
    expect(s.ingest.buckets).toHaveLength(30);
    const total = (status: string) => s.ingest.buckets.reduce((n: number, b: any) => n + (b.counts[status] ?? 0), 0);
    expect([total('202'), total('401')]).toEqual([5, 1]);
    expect(s.ingest.buckets.every((b: any, i: number) => i === 0 || Date.parse(b.start) - Date.parse(s.ingest.buckets[i - 1].start) === 10_000)).toBe(true);

    expect(s.consumers.map((c: any) => [c.group, c.up])).toEqual(
      ['activity-projector', 'conversation-projector', 'flow-matcher'].map((n) => [`${rt.env.CONSUMER_GROUP_PREFIX}${n}`, true]),
    );
  });

  it("carries no shop's data: no shop id, key, email or record", async () => {
    const [json, html] = await Promise.all([
      fetch(`${server.baseUrl}/status.json`).then((r) => r.text()),
      fetch(`${server.baseUrl}/status`).then((r) => r.text()),
    ]);
    for (const text of [json, html]) {
      expect(text).not.toContain(shop.shopId);
      expect(text).not.toContain(shop.key);
      expect(text).not.toContain('example.com');
      expect(text).not.toContain('placed_order');
    }
  });

  it('is open as /metrics is, and asks for STATUS_TOKEN (Bearer or ?token=) when it is set', async () => {
    const open = await fetch(`${server.baseUrl}/status`);
    expect([open.status, open.headers.get('content-type')]).toEqual([200, 'text/html; charset=utf-8']);
    const token = 'status-token-0123456789';
    const guarded = await startTestRuntime({ STATUS_TOKEN: token }, 'status-token');
    const other = await startTestServer(guarded, []);
    try {
      const status = (p: string, headers: Record<string, string> = {}) => fetch(`${other.baseUrl}${p}`, { headers }).then((r) => r.status);
      expect(await status('/status')).toBe(401);
      expect(await status('/status.json')).toBe(401);
      expect(await status('/status.json', { authorization: 'Bearer wrong-token-0123456789' })).toBe(401);
      expect(await status('/status.json?token=wrong')).toBe(401);
      expect(await status('/status.json', { authorization: `Bearer ${token}` })).toBe(200);
      expect(await status(`/status?token=${token}`)).toBe(200);
      expect(await status(`/status.json?token=${token}`)).toBe(200);
      expect(await status('/metrics')).toBe(200);
    } finally {
      await other.stop();
      await guarded.close();
    }
  });
});

describe('/status in headless Chromium', () => {
  it('renders the three projections and the ingest answers with no console error, and refreshes in place', async (ctx) => {
    let executablePath: string;
    try {
      executablePath = ensureChromium();
    } catch (e) {
      if (e instanceof ChromiumUnavailableError) return ctx.skip(e.message);
      throw e;
    }
    const userDataDir = mkdtempSync(path.join(tmpdir(), 'shopstream-chromium-'));
    const browser = await chromium.launchPersistentContext(userDataDir, {
      executablePath,
      headless: true,
      viewport: { width: 1200, height: 900 },
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
      timeout: 120_000,
    });
    try {
      const page = browser.pages()[0] ?? (await browser.newPage());
      const errors: string[] = [];
      page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
      page.on('pageerror', (e) => errors.push(e.message));
      // Any request but the page's own two would be an external asset.
      const requested: string[] = [];
      page.on('request', (r) => requested.push(new URL(r.url()).pathname));

      // Answers of this moment, so the chart's window (5 minutes) holds some however long the set-up took.
      expect(
        (await fetch(`${server.baseUrl}/v2026-04/events/`, { method: 'POST', headers: shop.headers, body: '{"name": "n", "metric": {"metric_name": "m"}}' }))
          .status,
      ).toBe(202);
      expect((await fetch(`${server.baseUrl}/v2026-04/events/`, { method: 'POST', headers: shop.headers, body: '{}' })).status).toBe(400);
      // The page reads what the projector has applied: on a busy machine that event may still be on its way.
      await waitFor(async () => (await statusJson()).projections?.find((p: any) => p.projection === 'activity-projector')?.lag === 0 || undefined, {
        message: 'the event just posted applied, on /status.json',
      });
      await page.goto(`${server.baseUrl}/status`, { timeout: 60_000 });
      await page.waitForSelector('body[data-loaded="true"]', { timeout: 60_000 });
      const cards = await page.$$eval('[data-projection]', (els) => els.map((e) => e.getAttribute('data-projection')));
      expect(cards).toEqual(['activity-projector', 'flow-matcher', 'conversation-projector']);
      const activity = await page.textContent('[data-projection="activity-projector"]');
      expect(activity).toContain('dead letters1');
      expect(activity).toContain('lag0 records');
      expect(await page.$$eval('#ingest tr[data-status]', (els) => els.map((e) => e.getAttribute('data-status')))).toEqual(
        expect.arrayContaining(['202', '400']),
      );
      expect(await page.$$eval('#chart polyline', (els) => els.map((e) => e.getAttribute('data-class')).sort())).toEqual(['2xx', '4xx']);
      expect(await page.textContent('#consumers')).toContain(`${rt.env.CONSUMER_GROUP_PREFIX}flow-matcher`);

      // Refreshed in place: the page fetches status.json again and redraws, without a reload.
      await page.evaluate(() => ((window as any).marker = 'same page'));
      const first = await page.textContent('#meta');
      await page.waitForFunction((before) => document.getElementById('meta')!.textContent !== before, first, { timeout: 60_000 });
      expect(await page.evaluate(() => (window as any).marker)).toBe('same page');

      const shot = path.join(userDataDir, 'status-page.png');
      await page.screenshot({ path: shot, fullPage: true });
      const png = readFileSync(shot);
      expect(png.subarray(1, 4).toString('latin1')).toBe('PNG');
      expect(png.length).toBeGreaterThan(10_000);
      if (process.env.SHOPSTREAM_UPDATE_SCREENSHOT === '1') copyFileSync(shot, new URL('../docs/status-page.png', import.meta.url));

      expect([...new Set(requested)].sort()).toEqual(['/status', '/status.json']);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
      rmSync(userDataDir, { recursive: true, force: true });
    }
  }, 300_000);
});
