import http from 'node:http';
import net from 'node:net';
import {
  compressionBombs,
  NoAnswerError,
  operationsOf,
  problemsOf,
  rawEdgeCases,
  sampleRequests,
  send,
  sendRaw,
  validEvent,
} from '@shopstream/testkit/badInput';
import { memoryOf, startAllInOne } from '../allInOne.js';
import type { Context, Figures, Scenario } from '../types.js';
import { noneRow } from '../scenarioFigures.js';

/** How long a slow client may take, in this scenario (the defaults are 10 s and 60 s; shorter, so the run is). */
const HEADERS_TIMEOUT_MS = 5_000;
const REQUEST_TIMEOUT_MS = 15_000;
/** The limits are checked every second; the rest is the event loop's lag under the load beside (a shared machine). */
const SLACK_MS = 5_000;

/**
 * Generated bad input against every operation of the served OpenAPI document, with the generators, the sender
 * and the check of test/badInput.property.spec.ts (@shopstream/testkit/badInput): mutated events and flows,
 * malformed JSON, deep nesting, huge and odd values, NUL and lone surrogates, prototype keys, SQL-looking text,
 * wrong content types, charsets and encodings, gzip and deflate bombs, oversized bodies, headers and URLs, bad
 * query strings, cursors and ids, duplicate Authorization headers; and a few slow clients beside them. The
 * all-in-one service in its own process, on its own broker and PostgreSQL; the load from this process.
 */
export const badInput: Scenario = {
  name: 'bad-input',
  description: 'generated bad requests at every endpoint: no 5xx, every failure in the error envelope, no silence, the process up',
  async run(ctx: Context): Promise<Figures> {
    // rounds: how many times each raw case is sent.
    const { total, bombMiB, rounds } = ctx.sized({ total: [2_000, 20_000], bombMiB: [256, 1024], rounds: [3, 20] });
    const concurrency = 8;
    const stack = await startAllInOne(ctx, {
      shops: 1,
      env: {
        HTTP_HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS),
        HTTP_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
        // The export's per-key limit (60 a minute) would answer most export requests 429 before reading them.
        EXPORT_RATE_LIMIT_PER_MINUTE: '1000000',
      },
    });
    const { service } = stack;
    const pid = service.process.pid!;
    const [shop] = stack.shops;
    const operations = operationsOf((await (await fetch(`${service.baseUrl}/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> });
    ctx.log(`${operations.length} operations in /openapi.json; making ${bombMiB} MiB bombs`);
    const bombs = await compressionBombs(bombMiB);
    ctx.log(`bombs: gzip ${(bombs.gzip.length / 1024).toFixed(0)} KiB, deflate ${(bombs.deflate.length / 1024).toFixed(0)} KiB on the wire`);
    const memBefore = memoryOf(pid);

    // Memory, sampled through the run (the peak is also the kernel's own VmHWM at the end).
    let sampling = true;
    let rssMaxSampled = 0;
    const sampler = (async () => {
      while (sampling) {
        rssMaxSampled = Math.max(rssMaxSampled, memoryOf(pid)?.rssMiB ?? 0);
        await new Promise((r) => setTimeout(r, 200));
      }
    })();

    const slow = slowClients(service.baseUrl, shop);

    const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
    const statuses: Record<string, number> = {};
    const byOperation: Record<string, Record<string, number>> = {};
    const byTag: Record<string, Record<string, number>> = {};
    const problems: Record<string, number> = { server_error: 0, envelope: 0, request_id: 0 };
    const samples: string[] = [];
    const noAnswer: string[] = [];
    let sent = 0;
    let resetTolerated = 0;
    let slowest = 0;
    const slowSamples: { ms: number; op: string; method: string; tags: string[]; status: string }[] = [];
    const t0 = Date.now();
    const requests = sampleRequests({ operations, key: shop.key, shopId: shop.shopId, bombs }, total, ctx.opts.seed);
    const worker = async () => {
      for (;;) {
        const next = requests.next();
        if (next.done) return;
        const r = next.value;
        sent++;
        if (sent % 2_000 === 0) ctx.log(`${sent} sent`);
        const t = Date.now();
        let status: string;
        try {
          const res = await send(service.baseUrl, r, agent, 30_000);
          status = res.status === 0 ? 'reset after refusal' : String(res.status);
          if (res.status === 0) resetTolerated++;
          for (const p of problemsOf(r, res)) {
            problems[p.kind]++;
            if (samples.length < 50) samples.push(`${p.kind}: ${p.message.slice(0, 400)} [${r.tags.join(',')}]`);
          }
        } catch (e) {
          status = e instanceof NoAnswerError && e.code === 'TIMEOUT' ? 'no answer (30 s)' : 'connection broken';
          if (noAnswer.length < 50)
            noAnswer.push(`${r.method} ${r.path.slice(0, 150)} [${r.tags.join(',')}]: ${String(e instanceof Error ? e.message : e).slice(0, 200)}`);
        }
        const ms = Date.now() - t;
        slowest = Math.max(slowest, ms);
        if (ms > 1_000 && slowSamples.length < 100) slowSamples.push({ ms, op: r.operation, method: r.method, tags: r.tags, status });
        statuses[status] = (statuses[status] ?? 0) + 1;
        (byOperation[r.operation] ??= {})[status] = (byOperation[r.operation]?.[status] ?? 0) + 1;
        for (const tag of r.tags) (byTag[tag] ??= {})[status] = (byTag[tag]?.[status] ?? 0) + 1;
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    const elapsedS = (Date.now() - t0) / 1000;
    agent.destroy();

    // The raw cases (what only raw bytes can send), each a few times, on connections of their own.
    const raw = rawEdgeCases(shop);
    const rawStatuses: Record<string, Record<string, number>> = {};
    const rawJobs = Array.from({ length: rounds }, () => raw).flat();
    const rawWorker = async () => {
      for (let c = rawJobs.shift(); c; c = rawJobs.shift()) {
        sent++;
        let status: string;
        try {
          const res = await sendRaw(service.baseUrl, c.request, 30_000);
          status = String(res.status);
          for (const p of problemsOf({ method: c.method, path: c.name, headers: {}, operation: 'raw', tags: ['raw'] }, res)) {
            problems[p.kind]++;
            if (samples.length < 50) samples.push(`${p.kind}: raw ${c.name}: ${p.message.slice(0, 300)}`);
          }
        } catch (e) {
          status = e instanceof NoAnswerError && e.code === 'TIMEOUT' ? 'no answer (30 s)' : 'connection broken';
          if (noAnswer.length < 50) noAnswer.push(`raw ${c.name}: ${String(e instanceof Error ? e.message : e).slice(0, 200)}`);
        }
        statuses[status] = (statuses[status] ?? 0) + 1;
        (rawStatuses[c.name] ??= {})[status] = (rawStatuses[c.name]?.[status] ?? 0) + 1;
      }
    };
    await Promise.all(Array.from({ length: 4 }, rawWorker));
    ctx.log(`${raw.length} raw cases × ${rounds} sent`);
    ctx.log(`${sent} requests in ${elapsedS.toFixed(0)} s; waiting for the slow clients`);
    const slowResults = await slow;
    sampling = false;
    await sampler;

    // Still up: the process alive, /readyz 200, and a good event accepted.
    const alive = service.process.exitCode === null && service.process.signalCode === null;
    const readyz = await fetch(`${service.baseUrl}/readyz`, { signal: AbortSignal.timeout(5_000) }).then(
      (r) => r.status,
      () => 0,
    );
    const good = await fetch(`${service.baseUrl}/v2026-04/events/`, {
      method: 'POST',
      headers: shop.headers,
      body: JSON.stringify(validEvent()),
      signal: AbortSignal.timeout(10_000),
    }).then(
      (r) => r.status,
      () => 0,
    );
    const mem = memoryOf(pid);

    const fiveXX = Object.entries(statuses)
      .filter(([s]) => /^5\d\d$/.test(s))
      .reduce((n, [, c]) => n + c, 0);
    const silent = (statuses['no answer (30 s)'] ?? 0) + (statuses['connection broken'] ?? 0);
    const leastTried = Math.min(...operations.map((o) => Object.values(byOperation[`${o.method} ${o.path}`] ?? {}).reduce((a, b) => a + b, 0)));
    const slowBad = slowResults.filter((s) => !s.ok);
    const statusText = (m: Record<string, number>) =>
      Object.entries(m)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([s, n]) => `${s}: ${n.toLocaleString('en-US')}`)
        .join(', ');
    const crashed = !alive || readyz !== 200 || good !== 202;
    return {
      versions: stack.versions,
      rows: [
        { measure: 'requests sent', value: sent, goal: { text: `≥ ${total.toLocaleString('en-US')}`, met: sent >= total } },
        { measure: 'generated (fast-check)', value: total },
        {
          measure: 'operations of /openapi.json tried',
          value: `${Object.keys(byOperation).length} of ${operations.length}, each ≥ ${leastTried} times`,
          goal: { text: 'all', met: operations.every((o) => byOperation[`${o.method} ${o.path}`]) },
        },
        { measure: 'raw requests (of them)', value: `${raw.length} cases × ${rounds}` },
        { measure: 'answers by status', value: statusText(statuses) },
        noneRow('5xx', fiveXX),
        noneRow('failures outside the error envelope', problems.envelope),
        noneRow('answers without a request id', problems.request_id),
        noneRow('no answer or connection reset', silent),
        { measure: 'reset after a 413 for a body past the limit', value: resetTolerated, unit: '(the client still writing: allowed)' },
        { measure: 'slowest answer', value: Number((slowest / 1000).toFixed(2)), unit: 's' },
        {
          measure: 'slow clients ended by the server in time',
          value: `${slowResults.length - slowBad.length} of ${slowResults.length}`,
          goal: { text: `all, 408 in the envelope within the limit + ${SLACK_MS / 1000} s`, met: slowBad.length === 0 },
        },
        { measure: 'slow clients: longest held past the limit', value: Math.max(...slowResults.map((r) => r.overS)), unit: 's' },
        { measure: 'server RSS before / peak (VmHWM)', value: `${memBefore?.rssMiB ?? '?'} / ${mem?.peakMiB ?? '?'}`, unit: 'MiB' },
        { measure: 'crashes (process gone, /readyz not 200, a good event not 202)', value: crashed ? 1 : 0, goal: { text: '0', met: !crashed } },
      ],
      details: {
        total,
        concurrency,
        elapsedS,
        bombMiB,
        bombBytes: { gzip: bombs.gzip.length, deflate: bombs.deflate.length },
        timeouts: { headersMs: HEADERS_TIMEOUT_MS, requestMs: REQUEST_TIMEOUT_MS },
        statuses,
        byOperation,
        byTag,
        rawStatuses,
        slowAnswers: slowSamples,
        problems,
        samples,
        noAnswer,
        slowClients: slowResults,
        memory: { before: memBefore, after: mem, rssMaxSampledMiB: rssMaxSampled },
        end: { alive, readyz, goodEvent: good },
        log: service.logFile,
      },
      notes: [
        `${sent.toLocaleString('en-US')} generated requests (fast-check, seed ${ctx.opts.seed}; the generators of test/badInput.property.spec.ts, from @shopstream/testkit/badInput) over ${concurrency} keep-alive connections in ${elapsedS.toFixed(0)} s, against the all-in-one service in its own process (its own broker and PostgreSQL).`,
        `Bombs: ${bombMiB} MiB inflated (${(bombs.gzip.length / 1024).toFixed(0)} KiB gzip, ${(bombs.deflate.length / 1024).toFixed(0)} KiB deflate on the wire). Slow clients: headers ${HEADERS_TIMEOUT_MS / 1000} s, whole request ${REQUEST_TIMEOUT_MS / 1000} s (HTTP_HEADERS_TIMEOUT_MS, HTTP_REQUEST_TIMEOUT_MS; the defaults are 10 s and 60 s). The export's rate limit raised so its requests reach validation.`,
      ],
    };
  },
};

interface SlowResult {
  kind: string;
  status: number | 'closed without an answer' | 'still open';
  code?: string;
  afterS: number;
  /** How long after its limit the server ended it. */
  overS: number;
  ok: boolean;
}

/**
 * A few slow clients: half-sent headers, a body at a byte a second, a connection that sends nothing. Each must
 * be ended by the server within its limit (+ SLACK_MS): a 408 in the error
 * envelope where a request began, the connection closed where none did.
 */
async function slowClients(baseUrl: string, shop: { shopId: string; key: string }): Promise<SlowResult[]> {
  const url = new URL(baseUrl);
  const one = (kind: string, limitMs: number, start: (s: net.Socket) => NodeJS.Timeout | undefined, expectAnswer: boolean) =>
    new Promise<SlowResult>((resolve) => {
      const t0 = Date.now();
      const s = net.connect(Number(url.port), url.hostname);
      let text = '';
      let trickle: NodeJS.Timeout | undefined;
      const finish = (status: SlowResult['status'], code?: string) => {
        clearTimeout(giveUp);
        clearInterval(trickle);
        s.destroy();
        const afterS = Number(((Date.now() - t0) / 1000).toFixed(1));
        const inTime = Date.now() - t0 <= limitMs + SLACK_MS;
        const ok = inTime && (expectAnswer ? status === 408 && code === 'request_timeout' : status === 'closed without an answer' || status === 408);
        resolve({ kind, status, code, afterS, overS: Number((afterS - limitMs / 1000).toFixed(1)), ok });
      };
      const giveUp = setTimeout(() => finish('still open'), limitMs + 30_000);
      s.on('connect', () => (trickle = start(s)));
      s.on('data', (d) => (text += d.toString('utf8')));
      s.on('error', () => {});
      s.on('close', () => {
        if (!text) return finish('closed without an answer');
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
        const body = text.slice(text.indexOf('\r\n\r\n') + 4);
        let code: string | undefined;
        try {
          const parsed = JSON.parse(body);
          const id = /x-request-id:\s*(\S+)/i.exec(text)?.[1];
          if (parsed?.error?.request_id === id) code = parsed.error.code;
        } catch {
          code = undefined;
        }
        finish(status, code);
      });
    });
  const head = `POST /v2026-04/events/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${shop.key}\r\nX-Shop-Id: ${shop.shopId}\r\nContent-Type: application/json\r\n`;
  const runs: Promise<SlowResult>[] = [];
  for (let i = 0; i < 2; i++) {
    // The request line and some headers, then nothing more.
    runs.push(one('half-sent headers', HEADERS_TIMEOUT_MS, (s) => void s.write(head), true));
    // Headers one byte a second.
    runs.push(
      one(
        'headers at a byte a second',
        HEADERS_TIMEOUT_MS,
        (s) => {
          // The limit counts from the first byte: it goes at once.
          let i = 0;
          s.write(head[i++]);
          return setInterval(() => s.write(head[i++ % head.length]), 1_000);
        },
        true,
      ),
    );
    // The whole head, then a 1,000-byte body at a byte a second.
    runs.push(
      one(
        'body at a byte a second',
        REQUEST_TIMEOUT_MS,
        (s) => {
          s.write(`${head}Content-Length: 1000\r\n\r\n`);
          return setInterval(() => s.write(' '), 1_000);
        },
        true,
      ),
    );
    // Connected, nothing sent.
    runs.push(one('connected, nothing sent', HEADERS_TIMEOUT_MS, () => undefined, false));
  }
  return Promise.all(runs);
}
