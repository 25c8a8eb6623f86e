import http from 'node:http';
import net from 'node:net';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createDeflate, createGzip, deflateSync, gzipSync } from 'node:zlib';
import fc from 'fast-check';

/**
 * Bad input, generated: the requests of the property test test/badInput.property.spec.ts (a few thousand, in CI)
 * and of the `bad-input` fault scenario (20,000 and more against a server in its own process), with the one
 * sender and the one check both use. Whatever a client sends to any endpoint, the answer is never a 5xx,
 * every answer that is not a success is the error envelope of interface.md with the request id of its
 * X-Request-Id header, and the process keeps answering. The endpoints come from the server's own /openapi.json,
 * so a new one is covered too.
 */

export interface Operation {
  method: string;
  path: string;
}

/** Every operation of an OpenAPI document: `{ method: 'GET', path: '/v2026-04/flows/{id}/' }`. */
export function operationsOf(doc: { paths: Record<string, Record<string, unknown>> }): Operation[] {
  return Object.entries(doc.paths).flatMap(([path, ops]) =>
    Object.keys(ops)
      .filter((m) => m !== 'parameters')
      .map((method) => ({ method: method.toUpperCase(), path })),
  );
}

export interface BadRequest {
  method: string;
  /** The path and query, as sent (percent-encoded where the generator chose to). */
  path: string;
  headers: Record<string, string | string[]>;
  body?: Buffer;
  /** The operation of the document it was made from (`POST /v2026-04/events/`), whatever method was sent. */
  operation: string;
  /** What it holds: the body's family, its encoding, the odd headers (`mutated`, `deep`, `gzip-bomb`, `dup-auth`, ...). */
  tags: string[];
}

export interface Answer {
  /** 0: no HTTP answer, where that is allowed (see `send`). */
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** Thrown by `send` for a request left without an answer: a reset, a closed connection or a timeout. */
export class NoAnswerError extends Error {
  constructor(
    message: string,
    readonly code: string | undefined,
  ) {
    super(message);
  }
}

/**
 * Sends one request on `agent` and reads its answer. A request the server may refuse before reading it, whose
 * connection then closes under the writing client (below), answers status 0; any other broken connection, or
 * no answer within `timeoutMs`, is a NoAnswerError.
 */
export function send(baseUrl: string, r: BadRequest, agent: http.Agent, timeoutMs = 30_000): Promise<Answer> {
  const url = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, method: r.method, path: r.path, headers: r.headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', (e: NodeJS.ErrnoException) => reject(new NoAnswerError(`${r.method} ${r.path.slice(0, 120)}: ${e.message}`, e.code)));
    });
    req.setTimeout(timeoutMs, () => req.destroy(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: 'TIMEOUT' })));
    req.on('error', (e: NodeJS.ErrnoException) => {
      // A body past the limit (or a bomb, past it once inflated): the server answers 413 and closes without reading the rest, and the client, still
      // writing, may see the reset before the answer. Any other broken connection fails.
      if (((r.body?.length ?? 0) > 10 * 1024 * 1024 || r.tags.includes('bomb')) && (e.code === 'ECONNRESET' || e.code === 'EPIPE'))
        resolve({ status: 0, headers: {}, body: '' });
      // Known limit: a HEAD whose request line and headers pass 16 KiB over several packets gets its 431 with the
      // body (the method is known only when the refused packet holds the request line), which a client reads as
      // data after the answer. Only that case is let through.
      else if (r.method === 'HEAD' && e.code === 'HPE_CLOSED_CONNECTION' && r.path.length + JSON.stringify(r.headers).length > 16 * 1024)
        resolve({ status: 0, headers: {}, body: '' });
      else reject(new NoAnswerError(`${r.method} ${r.path.slice(0, 120)}: ${e.message}`, e.code));
    });
    req.end(r.body);
  });
}

/**
 * What is wrong with an answer, as sentences (none: nothing). `kind` says which goal it misses: `server_error`
 * (a 5xx), `envelope` (a failure outside `{error:{code,message,request_id,fields}}`, or its request id not the
 * X-Request-Id header's), `request_id` (no generated request id on the answer).
 */
export function problemsOf(r: BadRequest, res: Answer): { kind: 'server_error' | 'envelope' | 'request_id'; message: string }[] {
  if (res.status === 0) return [];
  const what = `${r.method} ${r.path.slice(0, 200)} -> ${res.status}: ${res.body.slice(0, 300)}`;
  const problems: { kind: 'server_error' | 'envelope' | 'request_id'; message: string }[] = [];
  const requestId = res.headers['x-request-id'];
  if (typeof requestId !== 'string' || !/^[0-9a-f-]{36}$/.test(requestId))
    problems.push({ kind: 'request_id', message: `no request id (${String(requestId)}): ${what}` });
  if (res.status >= 500) problems.push({ kind: 'server_error', message: what });
  if (res.status >= 400 && r.method !== 'HEAD') {
    let parsed: any;
    try {
      parsed = JSON.parse(res.body);
    } catch {
      parsed = undefined;
    }
    const e = parsed?.error;
    const ok =
      parsed !== null &&
      typeof parsed === 'object' &&
      Object.keys(parsed).join() === 'error' &&
      e !== null &&
      typeof e === 'object' &&
      Object.keys(e).sort().join() === 'code,fields,message,request_id' &&
      typeof e.code === 'string' &&
      typeof e.message === 'string' &&
      e.request_id === requestId &&
      e.fields !== null &&
      typeof e.fields === 'object';
    if (!ok) problems.push({ kind: 'envelope', message: `outside the error envelope: ${what}` });
  }
  return problems;
}

// ---- Pieces of bad input ----

const oddChars = ['\u0000', '\ud800', '\udfff', '\ufeff', '\u202e', '\u2028', '😀', '\uffff', 'é', '\\', '"', "'", '%', '\n', '\t'];
export const oddString = fc.oneof(
  fc.string({ maxLength: 20 }),
  fc.string({ unit: 'binary', maxLength: 20 }),
  fc.array(fc.constantFrom(...oddChars), { minLength: 1, maxLength: 5 }).map((a) => `x${a.join('')}y`),
  fc.constantFrom("'; DROP TABLE activities; --", "1' OR '1'='1", '$1', '\\x00', 'NULL', '%00', '../../etc/passwd', '<script>', '${jndi:x}'),
  fc.constantFrom('', ' ', 'a'.repeat(300), '9'.repeat(40)),
);
const oddNumber = fc.oneof(fc.double(), fc.constantFrom(1e308, -1e308, 2 ** 53 + 1, -0, 0.1), fc.integer());
/** Huge values a JSON body may still hold under the body limit: a long string, a wide object, a long array. */
const hugeValue = fc.constantFrom(
  () => 'h'.repeat(1_000_000),
  () => Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`k${i}`, i])),
  () => Array.from({ length: 100_000 }, (_, i) => i),
  () => '\u0000'.repeat(10_000),
  () => '\ud800'.repeat(10_000),
);
export const oddValue: fc.Arbitrary<unknown> = fc.oneof(
  oddString,
  oddNumber,
  fc.boolean(),
  fc.constant(null),
  fc.constant([]),
  fc.constant({}),
  fc.dictionary(oddString, oddString, { maxKeys: 3 }),
  fc
    .constantFrom('{"__proto__":1}', '{"__proto__":{"polluted":1}}', '{"constructor":{"prototype":{"x":1}}}', '{"prototype":1}')
    .map((j) => JSON.parse(j) as unknown),
);
const oddTime = fc.constantFrom(
  '2026-04-01T10:00:00+16:00',
  '2026-04-01T10:00:00-23:59',
  '9999-12-31T23:59:59-14:00',
  '0001-01-01T00:00:00+14:00',
  '2026-02-30T00:00:00Z',
  '2026-04-01',
  '+010000-01-01T00:00:00Z',
  'yesterday',
  '2026-04-01T10:00:00.123456789Z',
);

export const validEvent = () => ({
  name: 'Placed Order',
  metric: { metric_name: 'placed_order', additional_properties: { total: 12 } },
  contact: { email: 'a@example.com' },
});
export const validFlow = () => ({
  name: 'Big orders',
  trigger: { metric_name: 'placed_order', property_conditions: [{ field: 'cart.total', op: 'gte', value: 100 }] },
});
const fieldPaths = [
  ['name'],
  ['metric'],
  ['metric', 'metric_name'],
  ['metric', 'value'],
  ['metric', 'additional_properties'],
  ['event_time'],
  ['contact'],
  ['contact', 'email'],
  ['contact', 'phone'],
  ['trigger'],
  ['trigger', 'metric_name'],
  ['trigger', 'property_conditions'],
  ['status'],
  ['__proto__'],
  ['constructor'],
  ['unknown_field'],
];

const setField = (obj: any, path: string[], value: unknown) => {
  let at = obj;
  for (const k of path.slice(0, -1)) at = at[k] = at[k] !== null && typeof at[k] === 'object' ? at[k] : {};
  // defineProperty: a `__proto__` key must end up in the JSON as a key, as a client would send it.
  Object.defineProperty(at, path[path.length - 1], {
    value: value !== null && typeof value === 'object' ? structuredClone(value) : value,
    enumerable: true,
    writable: true,
    configurable: true,
  });
};

/** A valid event or flow with one to three fields replaced by odd values, written as JSON. */
export const mutated = fc
  .tuple(fc.boolean(), fc.array(fc.tuple(fc.constantFrom(...fieldPaths), fc.oneof(oddValue, oddTime)), { minLength: 1, maxLength: 3 }))
  .map(([event, changes]) => {
    const obj: any = event ? validEvent() : validFlow();
    for (const [path, value] of changes) setField(obj, path, value);
    return JSON.stringify(obj);
  });

/** A valid event or flow with one field holding a huge value (a megabyte string, 20,000 keys, 100,000 items). */
export const huge = fc.tuple(fc.boolean(), fc.constantFrom(...fieldPaths), hugeValue).map(([event, path, make]) => {
  const obj: any = event ? validEvent() : validFlow();
  setField(obj, path, make());
  return JSON.stringify(obj);
});

/** Numbers JSON.stringify cannot write: past a double's range, hundreds of digits, more digits than a double holds. */
export const oddNumberText = fc
  .tuple(
    fc.constantFrom('1e400', '-1e400', '1e-400', '9'.repeat(400), `0.${'1'.repeat(400)}`, '123456789012345678901234567890', '-0', '1E+2', '0e0'),
    fc.boolean(),
  )
  .map(([n, inValue]) =>
    inValue
      ? `{"name":"n","metric":{"metric_name":"m","value":${n}}}`
      : `{"name":"n","metric":{"metric_name":"m","additional_properties":{"n":${n}}},"event_time":${n}}`,
  );

export const deep = fc.tuple(fc.constantFrom(33, 200, 5_000, 100_000), fc.constantFrom('[', '{"a":'), fc.boolean()).map(([depth, open, inEvent]) => {
  const inner = open.repeat(depth) + '1' + (open === '[' ? ']' : '}').repeat(depth);
  return inEvent ? `{"name":"n","metric":{"metric_name":"m","additional_properties":{"x":${inner}}}}` : inner;
});

export const malformed = fc.oneof(
  fc.string({ maxLength: 50 }),
  mutated.chain((s) => fc.nat(s.length).map((n) => s.slice(0, n))),
  fc.constantFrom(
    '{',
    '{"name":',
    '[1,2',
    '{"a":1}}',
    'NaN',
    '{"a":undefined}',
    "{'a':1}",
    '\u0000',
    '{"a":"\\ud800"}',
    '{"a":"\\u0000"}',
    '{"\\u0000":1}',
    '{"__proto__":{"x":1}}',
  ),
);

/** A body and what it is. */
type Body = { bytes?: Buffer; tag: string };

/** Bodies, as bytes: most JSON-ish, some in other charsets, a few oversized. */
export const body: fc.Arbitrary<Body> = fc.oneof(
  { weight: 6, arbitrary: mutated.map((s) => ({ bytes: Buffer.from(s), tag: 'mutated' })) },
  { weight: 2, arbitrary: deep.map((s) => ({ bytes: Buffer.from(s), tag: 'deep' })) },
  { weight: 3, arbitrary: malformed.map((s) => ({ bytes: Buffer.from(s), tag: 'malformed' })) },
  { weight: 2, arbitrary: fc.json({ maxDepth: 4 }).map((s) => ({ bytes: Buffer.from(s), tag: 'json' })) },
  { weight: 1, arbitrary: mutated.map((s) => ({ bytes: Buffer.from(s, 'utf16le'), tag: 'utf16' })) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((a) => ({ bytes: Buffer.from(a), tag: 'binary' })) },
  { weight: 1, arbitrary: fc.oneof(huge, oddNumberText).map((s) => ({ bytes: Buffer.from(s), tag: 'huge' })) },
  { weight: 1, arbitrary: fc.constant(0).map(() => ({ bytes: oversized(), tag: 'oversized' })) },
  { weight: 1, arbitrary: fc.constant({ bytes: undefined, tag: 'none' }) },
);
let oversizedBody: Buffer | undefined;
/** 11 MiB of JSON: past the 10 MiB body limit. Made once. */
function oversized(): Buffer {
  return (oversizedBody ??= Buffer.from(`{"name":"${'a'.repeat(11 * 1024 * 1024)}"}`));
}

export const uuid = '00000000-0000-4000-8000-000000000000';
/** Every byte percent-encoded (encodeURIComponent throws on a lone surrogate; Buffer writes it as U+FFFD). */
export const pct = (v: string) => Buffer.from(v, 'utf8').toString('hex').replace(/../g, '%$&');
export const pathParam = fc.oneof(
  fc.constant(uuid),
  fc.uuid(),
  oddString.map(pct),
  fc.constantFrom('..', '%2e%2e', '%00', '%ED%A0%80', '%C0%80', '%ZZ', 'a'.repeat(2_000), "1'%20OR%201=1"),
);
export const queryValue = fc.oneof(
  { weight: 4, arbitrary: oddString.map(pct) },
  {
    weight: 4,
    arbitrary: fc.constantFrom(
      '-1',
      '0',
      '101',
      '%ED%A0%80',
      '%00',
      '1e3',
      '9'.repeat(30),
      'relative:-7d,',
      'relative:-99999d,',
      '2026-01-01T00:00:00Z,2026-12-31T00:00:00Z',
      ',',
      '%ZZ',
      'eyJ4IjoxfQ',
      'AAAA.BBBB',
      uuid,
      `${uuid},${uuid}`,
    ),
  },
  // Up to 600 ids: past about 440 the URL alone passes 16 KiB (431).
  { weight: 1, arbitrary: fc.integer({ min: 2, max: 600 }).map((n) => Array.from({ length: n }, () => uuid).join(',')) },
);
const queryKey = fc.constantFrom(
  'limit',
  'cursor',
  'id',
  'id__in',
  'contact_id',
  'contact_id__in',
  'agent_id',
  'resolution',
  'resolution__in',
  'created_at__range',
  'last_message_at__range',
  'metric_name',
  'scope',
  '__proto__',
  'constructor',
  'limit[]',
  'x',
);
export const query = fc
  .array(fc.tuple(queryKey, queryValue), { maxLength: 4 })
  .map((pairs) => (pairs.length ? `?${pairs.map(([k, v]) => `${k}=${v}`).join('&')}` : ''));

const authHeader = fc.oneof(
  { weight: 8, arbitrary: fc.constant('valid') },
  { weight: 1, arbitrary: fc.constantFrom('none', 'bogus', 'basic', 'twice', 'twice-bad-first', 'long') },
);
const contentType = fc.constantFrom(
  'application/json',
  'application/json',
  'application/json; charset=utf-8',
  'application/json; charset=latin1',
  'application/json; charset=utf-16',
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/json; charset=',
  '',
);
const encoding = fc.oneof(
  {
    weight: 40,
    arbitrary: fc.constantFrom(undefined, undefined, undefined, 'gzip', 'gzip-real', 'deflate', 'deflate-real', 'br', 'bogus', 'identity', 'gzip, gzip'),
  },
  // About one request in 50: each makes the server inflate up to its limit.
  { weight: 1, arbitrary: fc.constantFrom('gzip-bomb', 'deflate-bomb') },
);
const method = fc.constantFrom('GET', 'POST', 'PATCH', 'DELETE', 'PUT', 'HEAD', 'OPTIONS');

/**
 * Compression bombs: `mib` MiB of JSON-ish zeros (a string of them inside an event), gzip- and deflate-encoded,
 * about a thousandth of that on the wire. Made once per size, streamed (1 GiB is never held in memory).
 */
export async function compressionBombs(mib: number): Promise<{ gzip: Buffer; deflate: Buffer }> {
  const make = async (compress: () => NodeJS.ReadWriteStream) => {
    const out: Buffer[] = [];
    const zeros = Buffer.alloc(1024 * 1024, 0x30);
    async function* source() {
      yield Buffer.from('{"name":"bomb","metric":{"metric_name":"m"},"x":"');
      for (let i = 0; i < mib; i++) yield zeros;
      yield Buffer.from('"}');
    }
    const z = compress();
    z.on('data', (c: Buffer) => out.push(c));
    await pipeline(Readable.from(source()), z);
    return Buffer.concat(out);
  };
  return { gzip: await make(() => createGzip({ level: 9 })), deflate: await make(() => createDeflate({ level: 9 })) };
}

export interface BadRequestTarget {
  operations: Operation[];
  /** A key granted `shopId`: most requests are authenticated, so they reach validation. */
  key: string;
  shopId: string;
  /** From `compressionBombs`: without them, a bomb is sent as a small gzip body. */
  bombs?: { gzip: Buffer; deflate: Buffer };
}

/** One generated request against one operation of the document (or its path with another method). */
export function badRequest(target: BadRequestTarget): fc.Arbitrary<BadRequest> {
  return fc
    .record({
      op: fc.nat(),
      useOwnMethod: fc.boolean(),
      otherMethod: method,
      param: pathParam,
      query,
      auth: authHeader,
      shop: fc.oneof(fc.constant('own'), fc.constantFrom('none', 'not-a-uuid', uuid)),
      contentType,
      encoding,
      body,
      bigHeader: fc.nat(40),
    })
    .map((g): BadRequest => {
      const op = target.operations[g.op % target.operations.length];
      const tags = [g.body.tag];
      const headers: Record<string, string | string[]> = {};
      const bearer = `Bearer ${target.key}`;
      const auth: Record<string, string | string[] | undefined> = {
        valid: bearer,
        none: undefined,
        bogus: 'Bearer ssk_bogus',
        basic: 'Basic dXNlcjpwYXNz',
        twice: [bearer, bearer],
        'twice-bad-first': ['Bearer ssk_bogus', bearer],
        long: `Bearer ${'k'.repeat(5_000)}`,
      };
      if (auth[g.auth] !== undefined) headers.authorization = auth[g.auth]!;
      if (g.auth !== 'valid') tags.push(g.auth.startsWith('twice') ? 'dup-auth' : `auth-${g.auth}`);
      if (g.shop !== 'none') headers['x-shop-id'] = g.shop === 'own' ? target.shopId : g.shop;
      if (g.contentType) headers['content-type'] = g.contentType;
      if (g.contentType !== 'application/json') tags.push('content-type');
      let b = g.body.bytes;
      if ((g.encoding === 'gzip-bomb' || g.encoding === 'deflate-bomb') && target.bombs) {
        headers['content-encoding'] = g.encoding.replace('-bomb', '');
        b = g.encoding === 'gzip-bomb' ? target.bombs.gzip : target.bombs.deflate;
        tags.push('bomb');
      } else if (g.encoding?.endsWith('-real') || g.encoding?.endsWith('-bomb')) {
        // A real compressed body (a bomb without bombs given: its small version).
        if (b) {
          const gzip = g.encoding.startsWith('gzip');
          headers['content-encoding'] = gzip ? 'gzip' : 'deflate';
          b = gzip ? gzipSync(b) : deflateSync(b);
          tags.push('compressed');
        }
      } else if (g.encoding) {
        headers['content-encoding'] = g.encoding;
        tags.push('encoding');
      }
      if (g.bigHeader === 0) {
        headers['x-big'] = 'a'.repeat(20_000);
        tags.push('big-header');
      }
      const path = op.path.replace(/\{[^}]+\}/g, g.param) + g.query;
      if (path.length > 2_000) tags.push('long-url');
      // Explicit: Node's client sends no Content-Length for a HEAD's or a GET's body, whose bytes then arrive as a next request.
      if (b) headers['content-length'] = String(b.length);
      return { method: g.useOwnMethod ? op.method : g.otherMethod, path, headers, body: b, operation: `${op.method} ${op.path}`, tags };
    });
}

/** `n` requests of `badRequest(target)` from `seed`, made `batch` at a time (a generator: huge bodies are not all held at once). */
export function* sampleRequests(target: BadRequestTarget, n: number, seed: number, batch = 200): Generator<BadRequest> {
  const arb = badRequest(target);
  for (let i = 0; i < n; i += batch) yield* fc.sample(arb, { numRuns: Math.min(batch, n - i), seed: (seed + i) | 0 });
}

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
  text: string;
}

/** Sends raw bytes on a new connection and reads until the server closes or has answered one full response. */
export function sendRaw(baseUrl: string, request: string | Buffer, timeoutMs = 8_000): Promise<RawAnswer> {
  const url = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(url.port), url.hostname);
    let text = '';
    const timer = setTimeout(() => (s.destroy(), reject(new NoAnswerError(`no answer; got ${JSON.stringify(text.slice(0, 300))}`, 'TIMEOUT'))), timeoutMs);
    s.on('data', (d) => {
      text += d.toString('utf8');
      // An interim answer (100 Continue) comes before the answer.
      text = text.replace(/^HTTP\/1\.1 1\d\d [^\r]*\r\n(?:[^\r]+\r\n)*\r\n/, '');
      const end = text.indexOf('\r\n\r\n');
      if (end < 0) return;
      const len = /content-length:\s*(\d+)/i.exec(text.slice(0, end));
      if (len && Buffer.byteLength(text.slice(end + 4)) >= Number(len[1])) done();
    });
    s.on('end', done);
    s.on('error', (e: NodeJS.ErrnoException) => (clearTimeout(timer), reject(new NoAnswerError(e.message, e.code))));
    s.write(request);
    function done() {
      clearTimeout(timer);
      s.destroy();
      if (!text) return reject(new NoAnswerError('closed without an answer', 'CLOSED'));
      const end = text.indexOf('\r\n\r\n');
      const head = text.slice(0, end).split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of head.slice(1)) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
      resolve({ status: Number(head[0]?.split(' ')[1]), headers, body: text.slice(end + 4), text });
    }
  });
}

/**
 * Requests only raw bytes can send, which the HTTP layer itself refuses or must not trip on: two Authorization
 * headers, a HEAD, a 10,000-id URL, an oversized header, a request line that is not HTTP, a body both chunked and
 * with a length, bad chunk sizes, control characters in a header or the URL, an absolute-form target, HTTP/1.0.
 * Each must be answered (never silence), never a 5xx, and a failure in the error envelope.
 */
export function rawEdgeCases(shop: { key: string; shopId: string }): { name: string; method: string; request: string }[] {
  const event = JSON.stringify({ name: 'Placed Order', metric: { metric_name: 'placed_order' } });
  const good = `Authorization: Bearer ${shop.key}\r\n`;
  const bad = `Authorization: Bearer ssk_not_a_key\r\n`;
  const post = (auth: string, body = event, extra = '') =>
    `POST /v2026-04/events/ HTTP/1.1\r\nHost: x\r\nX-Shop-Id: ${shop.shopId}\r\nContent-Type: application/json\r\n${auth}${extra}Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
  const ids = Array.from({ length: 10_000 }, () => uuid).join(',');
  const chunked = (chunks: string) =>
    `POST /v2026-04/events/ HTTP/1.1\r\nHost: x\r\n${good}X-Shop-Id: ${shop.shopId}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunks}`;
  return [
    { name: 'two Authorization headers, both good', method: 'POST', request: post(good + good) },
    { name: 'two Authorization headers, the first bad', method: 'POST', request: post(bad + good) },
    { name: 'two Authorization headers, the second bad', method: 'POST', request: post(good + bad) },
    { name: 'Basic, then Bearer', method: 'POST', request: post(`Authorization: Basic abc\r\n${good}`) },
    {
      name: 'HEAD of a POST-only path',
      method: 'HEAD',
      request: `HEAD /v2026-04/events/ HTTP/1.1\r\nHost: x\r\n${good}X-Shop-Id: ${shop.shopId}\r\nConnection: close\r\n\r\n`,
    },
    {
      name: 'a 10,000-id id__in URL',
      method: 'GET',
      request: `GET /v2026-04/conversations/export/?id__in=${ids} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
    },
    { name: 'a 20 KiB header', method: 'POST', request: post(good, event, `X-Big: ${'a'.repeat(20_000)}\r\n`) },
    { name: '500 headers', method: 'POST', request: post(good, event, Array.from({ length: 500 }, (_, i) => `X-H${i}: v\r\n`).join('')) },
    { name: 'not an HTTP request line', method: '', request: 'BLAH\r\n\r\n' },
    { name: 'chunked and a Content-Length', method: 'POST', request: post(good, event, 'Transfer-Encoding: chunked\r\n') },
    { name: 'a bad chunk size', method: 'POST', request: chunked(`zz\r\n${event}\r\n0\r\n\r\n`) },
    { name: 'a chunk longer than its size', method: 'POST', request: chunked(`2\r\n${event}\r\n0\r\n\r\n`) },
    { name: 'a good chunked body', method: 'POST', request: chunked(`${Buffer.byteLength(event).toString(16)}\r\n${event}\r\n0\r\n\r\n`) },
    { name: 'a control character in a header value', method: 'POST', request: post(good, event, 'X-Odd: a\u0001b\r\n') },
    {
      name: 'a NUL in the URL',
      method: 'GET',
      request: `GET /v2026-04/flows/\u0000/ HTTP/1.1\r\nHost: x\r\n${good}X-Shop-Id: ${shop.shopId}\r\nConnection: close\r\n\r\n`,
    },
    { name: 'a space in the URL', method: 'GET', request: `GET /v2026-04/flows/a b/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n` },
    {
      name: 'an absolute-form target',
      method: 'GET',
      request: `GET http://evil.example/v2026-04/flows/ HTTP/1.1\r\nHost: x\r\n${good}X-Shop-Id: ${shop.shopId}\r\nConnection: close\r\n\r\n`,
    },
    { name: 'HTTP/1.0 without Host', method: 'GET', request: `GET /v2026-04/flows/ HTTP/1.0\r\n${good}X-Shop-Id: ${shop.shopId}\r\n\r\n` },
    { name: 'HTTP/2.0 on HTTP/1.1', method: 'GET', request: `GET /v2026-04/flows/ HTTP/2.0\r\nHost: x\r\n\r\n` },
    { name: 'a lowercase method', method: 'get', request: `get /v2026-04/flows/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n` },
    { name: 'a header without a colon', method: 'GET', request: `GET /v2026-04/flows/ HTTP/1.1\r\nHost: x\r\nNoColon\r\nConnection: close\r\n\r\n` },
    { name: 'an Expect: 100-continue', method: 'POST', request: post(good, event, 'Expect: 100-continue\r\n') },
    { name: 'an unknown Expect', method: 'POST', request: post(good, event, 'Expect: teapot\r\n') },
  ];
}
