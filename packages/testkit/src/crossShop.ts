import { conversationsTopic } from '@shopstream/contracts';
import { conversationUpserted } from './conversations.js';

/**
 * Cross-shop: every operation of the served OpenAPI document tried with a key of another shop, and with ids and
 * cursors of another shop under a shop's own key. Shared by test/crossShop.spec.ts (a server in the test's
 * process) and the `cross-shop` fault scenario (the all-in-one service in its own process): the seeding of
 * shop A, the attempts with what each must answer, the judgement of an answer and A's snapshot.
 */

export interface Shop {
  shopId: string;
  key: string;
  headers: Record<string, string>;
}

export interface Reply {
  status: number;
  body: any;
  text: string;
}

/** A call to the API under `baseUrl`: a path under /v2026-04 (or a full URL, a `next` link), JSON in and out. */
export type Call = (shop: Shop, method: string, path: string, body?: unknown, headers?: Record<string, string>) => Promise<Reply>;

export function caller(baseUrl: string): Call {
  return async (shop, method, p, body, headers = shop.headers) => {
    const res = await fetch(p.startsWith('http') ? p : `${baseUrl}/v2026-04${p}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    let parsed: any = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = null;
    }
    return { status: res.status, body: parsed, text };
  };
}

/** What shop A holds: its ids (the first of each kind, and all of them) and a second-page cursor per list. */
export interface ShopData {
  activity: string;
  contact: string;
  flow: string;
  conversation: string;
  /** A deletion job of A's (one that matched no contact). */
  deletionJob: string;
  /** Every id of A's (activities, contacts, flows, conversations, triggers, metric events) the seeding saw. */
  ids: Set<string>;
  /** Operation (`GET /v2026-04/flows/`) -> A's `next` link of its first page of one. */
  cursors: Record<string, string>;
}

async function poll<T>(fn: () => Promise<T | undefined | null | false>, what: string, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== null && v !== false) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Query parameters an operation cannot be called without. */
export function requiredQuery(template: string): string {
  return template.endsWith('/activities/') ? 'scope=workspace' : template.endsWith('/export/') ? 'created_at__range=relative:-1d,' : '';
}

/** Fills a path template with A's ids: an activity's id under /activities/, a deletion job's under /deletion-jobs/, else the flow or the contact. */
export function fillPath(template: string, A: Pick<ShopData, 'activity' | 'contact' | 'flow' | 'deletionJob'>): string {
  return template.replace(/\{(\w+)\}/g, (_m, name: string) =>
    template.includes('/activities/') ? A.activity : template.includes('/deletion-jobs/') ? A.deletionJob : name === 'contact_id' ? A.contact : A.flow,
  );
}

/**
 * Shop A's data, made through the API (and conversations through the bus, by `publish`): a flow, four events
 * (two with a contact, matching the flow), two conversations, a second flow; then a second-page cursor of every
 * list of the document, read with limit=1. `metricsUrl`: the /metrics of the process running the flow matcher
 * (its events must match the flow, so the flow must be loaded first).
 */
export async function seedShop(
  call: Call,
  a: Shop,
  doc: { paths: Record<string, Record<string, unknown>> },
  opts: { metricsUrl: string; publish(records: { key: string; value: string; headers: Record<string, string> }[]): Promise<void> },
): Promise<ShopData> {
  const ids = new Set<string>();
  const flow = await call(a, 'POST', '/flows/', { name: 'A orders', trigger: { metric_name: 'placed_order' } });
  if (flow.status !== 201 && flow.status !== 200) throw new Error(`A's flow: ${flow.status} ${flow.text}`);
  const A: Partial<ShopData> = { flow: flow.body.id };
  ids.add(flow.body.id);
  await poll(async () => /^shopstream_flow_matcher_active_flows [1-9]/m.test(await (await fetch(opts.metricsUrl)).text()), 'the flow loaded');
  for (const body of [
    { name: 'Placed order', metric: { metric_name: 'placed_order' }, contact: { email: 'a@example.com' } },
    { name: 'Placed order 2', metric: { metric_name: 'placed_order' }, contact: { email: 'a@example.com' } },
    { name: 'Viewed', metric: { metric_name: 'viewed' } },
    { name: 'Viewed 2', metric: { metric_name: 'viewed' } },
  ]) {
    const r = await call(a, 'POST', '/events/', body);
    if (r.status !== 202) throw new Error(`A's event: ${r.status} ${r.text}`);
    A.activity ??= r.body.activity_id;
    A.contact ??= r.body.contact?.id;
    ids.add(r.body.activity_id);
    if (r.body.contact?.id) ids.add(r.body.contact.id);
  }
  const at = (i: number) => new Date(Date.now() - (5 - i) * 60_000).toISOString();
  const records = [0, 1].map((i) => conversationUpserted(a.shopId, { created_at: at(i) }));
  for (const r of records) ids.add(r.conversation.id);
  A.conversation = records[0].conversation.id;
  await opts.publish(records.map((r) => conversationsTopic.record(r)));
  await poll(async () => (await call(a, 'GET', `/flows/${A.flow}/triggers/`)).body?.results?.length === 2, "A's triggers projected");
  await poll(async () => (await call(a, 'GET', '/activities/?scope=workspace')).body?.results?.length === 2, "A's workspace activities projected");
  await poll(
    async () => (await call(a, 'GET', '/conversations/export/?created_at__range=relative:-1d,')).body?.results?.length === 2,
    "A's conversations projected",
  );
  const second = await call(a, 'POST', '/flows/', { name: 'A second', trigger: { metric_name: 'other' } });
  ids.add(second.body.id);
  const job = await call(a, 'POST', '/data-privacy/deletion-jobs/', { email: 'nobody@example.com' });
  if (job.status !== 202) throw new Error(`A's deletion job: ${job.status} ${job.text}`);
  A.deletionJob = job.body.id;
  ids.add(job.body.id);
  const data = A as ShopData;
  data.ids = ids;
  // A's cursors: the second page of every list the document has, read with limit=1; and every id A's reads show.
  data.cursors = {};
  for (const [template, ops] of Object.entries(doc.paths)) {
    if (!('get' in ops)) continue;
    const q = [requiredQuery(template), 'limit=1'].filter(Boolean).join('&');
    const r = await call(a, 'GET', `${fillPath(template, data).replace('/v2026-04', '')}?${q}`);
    if (typeof r.body?.next === 'string') data.cursors[`GET ${template}`] = r.body.next;
    const all = await call(a, 'GET', `${fillPath(template, data).replace('/v2026-04', '')}${requiredQuery(template) ? `?${requiredQuery(template)}` : ''}`);
    for (const m of all.text.matchAll(/"(?:id|activity_id|metric_event_id|contact_id|flow_id|trigger_id)":"([0-9a-f-]{36})"/g)) ids.add(m[1]);
  }
  return data;
}

/** What shop A holds, as A reads it: compared before and after another shop's attempts. */
export async function snapshot(call: Call, a: Shop, A: ShopData) {
  return {
    activity: (await call(a, 'GET', `/activities/${A.activity}/`)).body,
    timeline: (await call(a, 'GET', `/contacts/${A.contact}/timeline/`)).body?.results,
    workspace: (await call(a, 'GET', '/activities/?scope=workspace')).body?.results,
    flows: (await call(a, 'GET', '/flows/')).body?.results,
    flow: (await call(a, 'GET', `/flows/${A.flow}/`)).body,
    triggers: (await call(a, 'GET', `/flows/${A.flow}/triggers/`)).body?.results,
    export: (await call(a, 'GET', '/conversations/export/?created_at__range=relative:-1d,')).body?.results,
  };
}

export interface Attempt {
  /**
   * `foreign-key`: B's key with A's shop id; `foreign-id`: B's own key with A's ids in the path; `foreign-cursor`:
   * B's own key with A's cursor (on A's path, or on B's own contact); `own`: B's own key on B's own lists and
   * writes (nothing of A's may appear).
   */
  kind: 'foreign-key' | 'foreign-id' | 'foreign-cursor' | 'own';
  /** The document's operation: `PATCH /v2026-04/flows/{id}/`. */
  op: string;
  method: string;
  path: string;
  body?: unknown;
  headers: Record<string, string>;
  expected: { status: number; code?: string };
}

/** A body each writing operation accepts from its own shop (so a refusal is the shop check's, not validation's). */
export function bodyFor(method: string, template: string): unknown {
  if (method === 'post')
    return template.includes('deletion-jobs')
      ? { email: 'x@example.com' }
      : template.includes('flows')
        ? { name: 'x', trigger: { metric_name: 'x' } }
        : template.includes('bulk')
          ? { events: [{ name: 'x', metric: { metric_name: 'x' } }] }
          : { name: 'x', metric: { metric_name: 'x' } };
  if (method === 'patch') return { status: 'paused', name: 'taken' };
  return undefined;
}

/**
 * Every attempt B makes on A: every operation of the document with B's key and A's shop id (403 forbidden),
 * every operation whose path takes an id with A's id under B's own key (404 not_found), every list A has a
 * second page of with A's cursor under B's own key (400 invalid_cursor; 404 where the path names A's id), A's
 * timeline cursor on B's own contact (400), and B's own lists (200, nothing of A's). `everyId`: each of A's ids
 * (of any kind) in every path that takes one, not only the id of the path's own kind.
 */
export function crossShopAttempts(
  doc: { paths: Record<string, Record<string, unknown>> },
  A: ShopData,
  b: Shop,
  bOwnContact: string,
  aShopId: string,
  opts: { everyId?: boolean } = {},
): Attempt[] {
  const out: Attempt[] = [];
  for (const [template, ops] of Object.entries(doc.paths)) {
    for (const method of Object.keys(ops).filter((m) => m !== 'parameters')) {
      const op = `${method.toUpperCase()} ${template}`;
      const q = requiredQuery(template);
      const p = `${fillPath(template, A).replace('/v2026-04', '')}${q ? `?${q}` : ''}`;
      const body = bodyFor(method, template);
      out.push({
        kind: 'foreign-key',
        op,
        method: method.toUpperCase(),
        path: p,
        body,
        headers: { ...b.headers, 'x-shop-id': aShopId },
        expected: { status: 403, code: 'forbidden' },
      });
      if (template.includes('{')) {
        out.push({ kind: 'foreign-id', op, method: method.toUpperCase(), path: p, body, headers: b.headers, expected: { status: 404, code: 'not_found' } });
        // everyId: also each of A's other ids (of any kind) in the path.
        for (const id of opts.everyId ? A.ids : []) {
          const pi = `${template.replace('/v2026-04', '').replace(/\{(\w+)\}/g, id)}${q ? `?${q}` : ''}`;
          if (pi !== p)
            out.push({
              kind: 'foreign-id',
              op,
              method: method.toUpperCase(),
              path: pi,
              body,
              headers: b.headers,
              expected: { status: 404, code: 'not_found' },
            });
        }
      } else if (method === 'get') out.push({ kind: 'own', op, method: 'GET', path: p, headers: b.headers, expected: { status: 200 } });
    }
  }
  for (const [op, url] of Object.entries(A.cursors)) {
    const p = url.replace(/^https?:\/\/[^/]+\/v2026-04/, '');
    // A path that names A's contact or flow: not B's, so 404 before the cursor is read.
    const namesA = op.includes('{');
    out.push({
      kind: 'foreign-cursor',
      op,
      method: 'GET',
      path: p,
      headers: b.headers,
      expected: namesA ? { status: 404, code: 'not_found' } : { status: 400, code: 'invalid_cursor' },
    });
    if (op.includes('{contact_id}')) {
      const cursor = new URL(url).searchParams.get('cursor')!;
      out.push({
        kind: 'foreign-cursor',
        op,
        method: 'GET',
        path: `/contacts/${bOwnContact}/timeline/?limit=1&cursor=${encodeURIComponent(cursor)}`,
        headers: b.headers,
        expected: { status: 400, code: 'invalid_cursor' },
      });
    }
  }
  return out;
}

/**
 * Whether B's answer reveals or changes A's data: a success to a foreign key, id or cursor (a read shows A's,
 * a write changes it), or any answer naming one of A's ids that B did not send itself.
 */
export function revealsOrChanges(attempt: Attempt, reply: Reply, A: ShopData): string | undefined {
  if (attempt.kind !== 'own' && reply.status >= 200 && reply.status < 300)
    return `${attempt.kind} ${attempt.method} ${attempt.path}: ${reply.status} ${reply.text.slice(0, 200)}`;
  const sent = `${attempt.path} ${JSON.stringify(attempt.body ?? null)}`;
  for (const id of A.ids) if (reply.text.includes(id) && !sent.includes(id)) return `${attempt.kind} ${attempt.method} ${attempt.path}: names A's ${id}`;
  return undefined;
}

/**
 * B records an event naming A's contact id as its own remote id: accepted, and the contact is B's own (not A's).
 * Its contact is the one B's timeline-cursor attempt reads.
 */
export async function ownEventWithForeignContact(call: Call, b: Shop, A: ShopData): Promise<{ reply: Reply; contact: string | undefined; problem?: string }> {
  const reply = await call(b, 'POST', '/events/', { name: 'B order', metric: { metric_name: 'placed_order' }, contact: { remote_id: A.contact } });
  const contact = reply.body?.contact?.id as string | undefined;
  const problem =
    reply.status !== 202
      ? `B's own event: ${reply.status} ${reply.text.slice(0, 200)}`
      : contact === A.contact
        ? `B's event with A's contact id as its remote id got A's contact ${contact}`
        : undefined;
  return { reply, contact, problem };
}
