import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conversationsTopic, type ConversationData, type ConversationRecord } from '@shopstream/contracts';
import { sql, type SQLQuery } from '@shopstream/db';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { startConversationProjector } from '@shopstream/conversation-projector';
import { createTestShop, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';
import { testConversation as conversation } from '@shopstream/testkit';
// The export's routes with a clock seam; the query-api's start mounts the same function.
import { queryApi } from '@shopstream/query-api';
import { exportRoutes, fetchExportPage } from '@shopstream/query-api/export';

const DAY = 24 * 3600 * 1000;
/** The frozen "now" of the export under test; tests move it to show what a cursor pins. */
let now = Date.parse('2026-04-15T12:00:00.000Z');

let rt: Runtime;
let projector: StartedService;
let server: TestServer;

const exportService = (r: Runtime): StartedService => ({ name: 'export', ...exportRoutes(queryApi.context(r), { clock: () => now }), stop: async () => {} });

const out = (r: ConversationRecord) => conversationsTopic.record(r);

/** Publishes the conversations (and messages) and waits until the read model holds them all. */
async function seed(
  shop: string,
  conversations: ConversationData[],
  messages: { conversation_id: string; id: string; created_at: string; text: string }[] = [],
) {
  const records: ConversationRecord[] = [
    ...conversations.map((c): ConversationRecord => ({ type: 'conversation.upserted', shop_id: shop, conversation: c })),
    ...messages.map(({ conversation_id, ...m }): ConversationRecord => ({ type: 'message.created', shop_id: shop, conversation_id, message: m })),
  ];
  await rt.bus.publish(rt.topics.conversations, records.map(out));
  const ids = conversations.map((c) => c.id);
  const updated = conversations.map((c) => c.updated_at);
  const mids = messages.map((m) => m.id);
  await waitFor(
    async () => {
      // Each conversation as seeded (its updated_at), not only there: a seed that changes conversations already
      // projected waits for the change, not for the rows it replaces.
      const [c] = await rt.db.query(
        sql`SELECT count(*)::int AS n FROM conversations c JOIN unnest(${`{${ids.join(',')}}`}::uuid[], ${`{${updated.join(',')}}`}::timestamptz[]) AS x(id, updated_at)
            ON c.id = x.id AND c.updated_at = x.updated_at WHERE c.shop_id = ${shop}`,
      );
      const [m] = await rt.db.query(
        sql`SELECT count(*)::int AS n FROM conversation_messages WHERE shop_id = ${shop} AND id = ANY(${`{${mids.join(',')}}`}::uuid[])`,
      );
      return c.n === ids.length && m.n === mids.length;
    },
    { message: `${ids.length} conversations projected`, timeoutMs: 30_000 },
  );
}

/** Conversations in the export's order. */
const ordered = (cs: ConversationData[]) =>
  cs.slice().sort((a, b) => Date.parse(a.created_at) - Date.parse(b.created_at) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));

type Page = { results: { id: string; [k: string]: unknown }[]; next: string | null; previous: string | null };

async function get(url: string, headers: Record<string, string>): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(url, { headers });
  return { status: res.status, body: await res.json(), headers: res.headers };
}
const exportUrl = (params: Record<string, string> = {}) => `${server.baseUrl}/v2026-04/conversations/export/?${new URLSearchParams(params)}`;

async function page(url: string, headers: Record<string, string>): Promise<Page> {
  const r = await get(url, headers);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as Page;
}

/** Follows next from the first page until it is null: the pages, in order. */
async function walk(params: Record<string, string>, headers: Record<string, string>): Promise<Page[]> {
  const pages: Page[] = [await page(exportUrl(params), headers)];
  while (pages[pages.length - 1].next) {
    pages.push(await page(pages[pages.length - 1].next!, headers));
    if (pages.length > 500) throw new Error('runaway paging');
  }
  return pages;
}
const idsOf = (pages: Page[]) => pages.flatMap((p) => p.results.map((c) => c.id));

beforeAll(async () => {
  // The rate limit has its own spec; here it must not get in the way of walking many pages.
  rt = await startTestRuntime({ EXPORT_RATE_LIMIT_PER_MINUTE: '1000000' }, 'export-test');
  projector = await startConversationProjector(rt);
  server = await startTestServer(rt, [exportService(rt)]);
});
afterAll(async () => {
  await projector?.stop();
  // Also closes the runtime.
  await server?.stop();
});

describe('GET /v2026-04/conversations/export/', () => {
  it('returns every field of a conversation, messages inlined oldest first, nullable fields null and absent optionals omitted', async () => {
    const { shopId, headers } = await createTestShop(rt);
    const full = conversation({
      created_at: '2026-04-01T08:00:00.000Z',
      updated_at: '2026-04-01T09:00:00.000Z',
      agent_id: randomUUID(),
      contact_id: randomUUID(),
      user_id: randomUUID(),
      escalation_time: '2026-04-01T08:05:00.000Z',
      start_time: '2026-04-01T08:00:01.000Z',
      resolved_at: '2026-04-01T08:30:00.000Z',
      summary: 'Refund issued.',
      title: 'Double charge',
      flags: [{ id: randomUUID(), name: 'Needs review' }],
      tags: ['vip', 'eu'],
      intent: { id: randomUUID(), name: 'Double charge' },
      topic: { id: randomUUID(), name: 'Billing' },
      resolution: 'human',
      status: 'pending',
      type: 'phone_call',
    });
    const bare = conversation({ created_at: '2026-04-01T08:00:00.000123Z', type: 'sms' });
    const [m1, m2, m3] = ['00000000-0000-4000-8000-000000000001', '00000000-0000-4000-8000-000000000002', '00000000-0000-4000-8000-000000000003'];
    await seed(
      shopId,
      [full, bare],
      [
        { conversation_id: full.id, id: m3, created_at: '2026-04-01T08:10:00.000Z', text: 'third (latest)' },
        { conversation_id: full.id, id: m2, created_at: '2026-04-01T08:02:00.000Z', text: 'second (same time, larger id)' },
        { conversation_id: full.id, id: m1, created_at: '2026-04-01T08:02:00.000Z', text: 'first' },
      ],
    );
    const body = await page(exportUrl(), headers);
    expect(body).toEqual({
      results: [
        {
          id: full.id,
          agent_id: full.agent_id,
          contact_id: full.contact_id,
          user_id: full.user_id,
          created_at: '2026-04-01T08:00:00.000Z',
          updated_at: '2026-04-01T09:00:00.000Z',
          escalation_time: '2026-04-01T08:05:00.000Z',
          start_time: '2026-04-01T08:00:01.000Z',
          last_message_at: '2026-04-01T08:10:00.000Z',
          resolved_at: '2026-04-01T08:30:00.000Z',
          last_message_content: 'third (latest)',
          summary: 'Refund issued.',
          title: 'Double charge',
          flags: full.flags,
          tags: ['vip', 'eu'],
          intent: full.intent,
          topic: full.topic,
          messages: [
            { id: m1, created_at: '2026-04-01T08:02:00.000Z', text: 'first' },
            { id: m2, created_at: '2026-04-01T08:02:00.000Z', text: 'second (same time, larger id)' },
            { id: m3, created_at: '2026-04-01T08:10:00.000Z', text: 'third (latest)' },
          ],
          resolution: 'human',
          status: 'pending',
          type: 'phone_call',
        },
        {
          id: bare.id,
          agent_id: null,
          contact_id: null,
          user_id: null,
          created_at: '2026-04-01T08:00:00.000123Z',
          updated_at: '2026-04-01T08:00:00.000123Z',
          escalation_time: null,
          start_time: null,
          last_message_at: null,
          resolved_at: null,
          flags: [],
          tags: [],
          intent: {},
          topic: {},
          messages: [],
          type: 'sms',
        },
      ],
      next: null,
      previous: null,
    });
  });

  it('walks a few hundred conversations that share created_at values forward and back: each once, in order', async () => {
    const { shopId, headers } = await createTestShop(rt);
    const base = Date.parse('2026-03-20T00:00:00.000Z');
    // 300 conversations on 17 distinct instants: ties broken by id all over the place.
    const all = Array.from({ length: 300 }, (_, i) => conversation({ created_at: new Date(base + (i % 17) * 60_000).toISOString() }));
    await seed(shopId, all);
    const expected = ordered(all).map((c) => c.id);

    const forward = await walk({ limit: '7' }, headers);
    expect(idsOf(forward)).toEqual(expected);
    expect(forward.length).toBe(43);
    expect(forward.map((p) => p.results.length)).toEqual([...Array(42).fill(7), 6]);
    expect(forward[0].previous).toBeNull();
    expect(forward[42].next).toBeNull();
    for (const p of forward) {
      for (const link of [p.next, p.previous].filter((l): l is string => l !== null)) {
        const u = new URL(link);
        expect(`${u.origin}${u.pathname}`).toBe(`${server.baseUrl}/v2026-04/conversations/export/`);
        expect(u.searchParams.get('limit')).toBe('7');
        expect(u.searchParams.get('cursor')).toMatch(/^[\w-]+\.[\w-]+$/);
      }
    }

    // previous of page k+1 is page k, all the way back to the first page, whose previous is null.
    const backward: Page[] = [forward[42]];
    while (backward[backward.length - 1].previous) backward.push(await page(backward[backward.length - 1].previous!, headers));
    expect(backward.length).toBe(43);
    backward.reverse();
    for (let k = 0; k < 43; k++)
      expect(
        backward[k].results.map((c) => c.id),
        `page ${k}`,
      ).toEqual(forward[k].results.map((c) => c.id));
    expect(backward[0].previous).toBeNull();
    // Going forward again from a page reached backwards gives the same next page.
    expect((await page(backward[10].next!, headers)).results.map((c) => c.id)).toEqual(forward[11].results.map((c) => c.id));

    // Default limit: 100 per page.
    const big = await walk({}, headers);
    expect(big.map((p) => p.results.length)).toEqual([100, 100, 100]);
    expect(idsOf(big)).toEqual(expected);
  });

  it('applies each filter alone and all of them combined', async () => {
    const { shopId, headers } = await createTestShop(rt);
    const [agentA, agentB, contactA, contactB, contactC] = Array.from({ length: 5 }, () => randomUUID());
    const at = (d: string) => `2026-04-${d}T10:00:00.000Z`;
    const cs = [
      conversation({ created_at: at('01'), agent_id: agentA, contact_id: contactA, resolution: 'hard' }),
      conversation({ created_at: at('02'), agent_id: agentA, contact_id: contactB, resolution: 'soft' }),
      conversation({ created_at: at('03'), agent_id: agentB, contact_id: contactC, resolution: 'escalated' }),
      conversation({ created_at: at('04'), agent_id: agentB, contact_id: contactA, resolution: 'human' }),
      conversation({ created_at: at('05'), agent_id: null, contact_id: null }),
      conversation({ created_at: at('06'), agent_id: agentA, contact_id: contactA, resolution: 'hard' }),
      conversation({ created_at: at('07'), agent_id: agentA, contact_id: contactC, resolution: 'merged' }),
    ];
    const msg = (c: ConversationData, d: string) => ({ conversation_id: c.id, id: randomUUID(), created_at: at(d), text: `m ${d}` });
    await seed(shopId, cs, [msg(cs[0], '10'), msg(cs[1], '12'), msg(cs[2], '11'), msg(cs[5], '13')]);
    const idx = (...i: number[]) => i.map((k) => cs[k].id);
    const ids = async (params: Record<string, string>) => idsOf(await walk(params, headers));

    expect(await ids({})).toEqual(idx(0, 1, 2, 3, 4, 5, 6));
    expect(await ids({ agent_id: agentA })).toEqual(idx(0, 1, 5, 6));
    expect(await ids({ contact_id: contactA })).toEqual(idx(0, 3, 5));
    expect(await ids({ contact_id__in: `${contactB},${contactC}` })).toEqual(idx(1, 2, 6));
    expect(await ids({ id: cs[3].id })).toEqual(idx(3));
    expect(await ids({ id__in: [cs[6].id, cs[0].id, cs[4].id].join(',') })).toEqual(idx(0, 4, 6));
    expect(await ids({ resolution: 'hard' })).toEqual(idx(0, 5));
    expect(await ids({ resolution__in: 'soft,human,merged' })).toEqual(idx(1, 3, 6));
    // Half-open: the start is in, the end is out.
    expect(await ids({ created_at__range: `${at('02')},${at('05')}` })).toEqual(idx(1, 2, 3));
    expect(await ids({ last_message_at__range: `${at('11')},${at('13')}` })).toEqual(idx(1, 2));
    // AND-combined.
    expect(await ids({ agent_id: agentA, resolution__in: 'hard,soft,merged', created_at__range: `${at('02')},${at('08')}` })).toEqual(idx(1, 5, 6));
    expect(await ids({ agent_id: agentA, contact_id: contactA, last_message_at__range: `${at('01')},${at('30')}` })).toEqual(idx(0, 5));
    expect(await ids({ contact_id: contactA, contact_id__in: contactB })).toEqual([]);
    // Uppercase uuids are the same ids.
    expect(await ids({ agent_id: agentB.toUpperCase() })).toEqual(idx(2, 3));
    // Filters survive paging: the links repeat them.
    const pages = await walk({ agent_id: agentA, limit: '1' }, headers);
    expect(idsOf(pages)).toEqual(idx(0, 1, 5, 6));
    expect(new URL(pages[0].next!).searchParams.get('agent_id')).toBe(agentA);
  });

  it('resolves a relative window at the first request and keeps those bounds on every page', async () => {
    const { shopId, headers } = await createTestShop(rt);
    now = Date.parse('2026-04-15T12:00:00.000Z');
    const ago = (ms: number) => new Date(now - ms).toISOString();
    const cs = [
      conversation({ created_at: ago(8 * DAY) }),
      conversation({ created_at: ago(6 * DAY) }),
      conversation({ created_at: ago(5 * DAY) }),
      conversation({ created_at: ago(3600_000) }),
      conversation({ created_at: ago(0) }),
    ];
    await seed(shopId, cs);
    expect(idsOf(await walk({ created_at__range: 'relative:-7d,' }, headers))).toEqual([cs[1].id, cs[2].id, cs[3].id]);
    // Both sides relative; the end is excluded (cs[3] is exactly 1 h ago).
    expect(idsOf(await walk({ created_at__range: 'relative:-6d,relative:-1h' }, headers))).toEqual([cs[1].id, cs[2].id]);
    expect(idsOf(await walk({ created_at__range: 'relative:-1w,relative:-90m' }, headers))).toEqual([cs[1].id, cs[2].id]);

    const first = await page(exportUrl({ created_at__range: 'relative:-7d,', limit: '1' }), headers);
    expect(first.results.map((c) => c.id)).toEqual([cs[1].id]);
    // Two days later, with a conversation that the window as re-resolved now would take in.
    now += 2 * DAY;
    const late = conversation({ created_at: new Date(now - DAY).toISOString() });
    await seed(shopId, [late]);
    const second = await page(first.next!, headers);
    const third = await page(second.next!, headers);
    expect([second, third].flatMap((p) => p.results.map((c) => c.id))).toEqual([cs[2].id, cs[3].id]);
    expect(third.next).toBeNull();
    // Back to the start: cs[1] is outside "the last 7 days" by now, but inside the pinned window.
    expect((await page(second.previous!, headers)).results.map((c) => c.id)).toEqual([cs[1].id]);
    // A new request resolves the window anew.
    expect(idsOf(await walk({ created_at__range: 'relative:-7d,' }, headers))).toEqual([cs[2].id, cs[3].id, cs[4].id, late.id]);
  });

  it('answers 400 with fields for every bad parameter', async () => {
    const { headers } = await createTestShop(rt);
    const cases: [Record<string, string>, string][] = [
      [{ created_at__range: '2026-01-01T00:00:00Z,2026-02-01T00:00:00Z' }, 'created_at__range'],
      [{ created_at__range: 'relative:-31d,' }, 'created_at__range'],
      [{ last_message_at__range: 'relative:-5w,' }, 'last_message_at__range'],
      [{ created_at__range: '2026-02-01T00:00:00Z,2026-01-01T00:00:00Z' }, 'created_at__range'],
      [{ created_at__range: '2026-02-01T00:00:00Z,2026-02-01T00:00:00Z' }, 'created_at__range'],
      [{ created_at__range: ',2026-02-01T00:00:00Z' }, 'created_at__range'],
      [{ created_at__range: 'yesterday,' }, 'created_at__range'],
      [{ created_at__range: '2026-02-01T00:00:00+02:00,' }, 'created_at__range'],
      [{ created_at__range: '2026-02-30T00:00:00Z,' }, 'created_at__range'],
      [{ created_at__range: 'relative:-7d' }, 'created_at__range'],
      [{ last_message_at__range: 'relative:+7d,' }, 'last_message_at__range'],
      [{ updated_at__range: 'relative:-31d,' }, 'updated_at__range'],
      [{ updated_at__range: '2026-02-01T00:00:00Z,2026-01-01T00:00:00Z' }, 'updated_at__range'],
      [{ updated_at__range: ',relative:-1d' }, 'updated_at__range'],
      [{ updated_at__range: 'since-last-run,' }, 'updated_at__range'],
      [{ updated_at__range: '0000-12-31T00:00:00Z,0001-01-02T00:00:00Z' }, 'updated_at__range'],
      [{ colour: 'blue' }, 'colour'],
      [{ limit: '0' }, 'limit'],
      [{ limit: '101' }, 'limit'],
      [{ limit: 'ten' }, 'limit'],
      [{ agent_id: 'nope' }, 'agent_id'],
      [{ contact_id__in: `${randomUUID()},nope` }, 'contact_id__in'],
      [{ id__in: Array.from({ length: 101 }, () => randomUUID()).join(',') }, 'id__in'],
      [{ id__in: `${randomUUID()},,${randomUUID()}` }, 'id__in'],
      [{ resolution: 'solved' }, 'resolution'],
      [{ resolution__in: 'hard,solved' }, 'resolution__in'],
    ];
    for (const [params, field] of cases) {
      const r = await get(exportUrl(params), headers);
      expect(r.status, JSON.stringify(params)).toBe(400);
      expect(r.body.error.code, JSON.stringify(params)).toBe('validation_error');
      expect(Object.keys(r.body.error.fields), JSON.stringify(params)).toEqual([field]);
      expect(r.body.error.request_id).toBe(r.headers.get('x-request-id'));
    }
    // A repeated parameter is not a list.
    const twice = await get(`${server.baseUrl}/v2026-04/conversations/export/?limit=5&limit=6`, headers);
    expect(twice.status).toBe(400);
    expect(Object.keys(twice.body.error.fields)).toEqual(['limit']);
    // Exactly 30 days and exactly 100 values are fine.
    expect((await get(exportUrl({ created_at__range: '2026-01-01T00:00:00Z,2026-01-31T00:00:00Z' }), headers)).status).toBe(200);
    expect((await get(exportUrl({ id__in: Array.from({ length: 100 }, () => randomUUID()).join(','), limit: '100' }), headers)).status).toBe(200);
  });

  it('rejects a tampered cursor and a cursor used with other filters or by another shop: 400 invalid_cursor', async () => {
    const { shopId, headers } = await createTestShop(rt);
    const other = await createTestShop(rt);
    const agent = randomUUID();
    await seed(
      shopId,
      Array.from({ length: 3 }, (_, i) => conversation({ created_at: `2026-04-0${i + 1}T00:00:00.000Z`, agent_id: agent, resolution: 'soft' })),
    );
    const first = await page(exportUrl({ agent_id: agent, resolution: 'soft', limit: '1' }), headers);
    const next = new URL(first.next!);
    const cursor = next.searchParams.get('cursor')!;
    expect((await get(next.toString(), headers)).status).toBe(200);

    const expectInvalid = async (url: URL | string, h = headers) => {
      const r = await get(url.toString(), h);
      expect(r.status, url.toString()).toBe(400);
      expect(r.body.error.code).toBe('invalid_cursor');
      expect(Object.keys(r.body.error.fields)).toEqual(['cursor']);
    };
    // Altered: one character of the payload, then of the signature; or not a cursor at all.
    const [body, mac] = cursor.split('.');
    const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1);
    for (const tampered of [`${flip(body, 10)}.${mac}`, `${body}.${flip(mac, 5)}`, 'garbage', `${body}.`]) {
      const u = new URL(next);
      u.searchParams.set('cursor', tampered);
      await expectInvalid(u);
    }
    // Forged: a well-formed payload signed with another key.
    const forged = new URL(next);
    forged.searchParams.set('cursor', `${Buffer.from(JSON.stringify({ v: 1, d: 'next', k: null, f: 'x', w: {} })).toString('base64url')}.${mac}`);
    await expectInvalid(forged);
    // Other filters: changed, removed, added.
    const changed = new URL(next);
    changed.searchParams.set('resolution', 'hard');
    await expectInvalid(changed);
    const removed = new URL(next);
    removed.searchParams.delete('agent_id');
    await expectInvalid(removed);
    const added = new URL(next);
    added.searchParams.set('created_at__range', 'relative:-7d,');
    await expectInvalid(added);
    // Another shop, with its own valid key.
    await expectInvalid(next, other.headers);
    // The limit may change between pages: it is not a filter.
    const smaller = new URL(next);
    smaller.searchParams.set('limit', '2');
    expect((await page(smaller.toString(), headers)).results.length).toBe(2);
  });

  it('conversations added while a client pages through never cause a repeat or a skip of those already there', async () => {
    const { shopId, headers } = await createTestShop(rt);
    const base = Date.parse('2026-04-02T00:00:00.000Z');
    const before = Array.from({ length: 40 }, (_, i) => conversation({ created_at: new Date(base + (i % 13) * 1000).toISOString() }));
    await seed(shopId, before);
    const first = await page(exportUrl({ limit: '10' }), headers);
    const seen = first.results.map((c) => c.id);
    // New ones at instants before, among and after those already there, tied instants included.
    const added = Array.from({ length: 30 }, (_, i) => conversation({ created_at: new Date(base - 5000 + i * 700).toISOString() }));
    await seed(shopId, added);
    let p = first;
    while (p.next) {
      p = await page(p.next, headers);
      seen.push(...p.results.map((c) => c.id));
    }
    expect(new Set(seen).size).toBe(seen.length);
    const expectedOld = ordered(before).map((c) => c.id);
    expect(seen.filter((id) => expectedOld.includes(id))).toEqual(expectedOld);
    // A new one after the position reached is in this pass; one before it is not; a second pass has all.
    const lastOfFirst = ordered(before)[9];
    const key = (c: ConversationData) => [Date.parse(c.created_at), c.id] as const;
    const afterPos = (c: ConversationData) => key(c)[0] > key(lastOfFirst)[0] || (key(c)[0] === key(lastOfFirst)[0] && c.id > lastOfFirst.id);
    expect(seen.filter((id) => !expectedOld.includes(id)).sort()).toEqual(
      added
        .filter(afterPos)
        .map((c) => c.id)
        .sort(),
    );
    expect(idsOf(await walk({ limit: '10' }, headers))).toEqual(ordered([...before, ...added]).map((c) => c.id));
  });

  it("a key for shop A never sees shop B's conversations", async () => {
    const a = await createTestShop(rt);
    const b = await createTestShop(rt);
    const onA = conversation({ created_at: '2026-04-03T00:00:00.000Z' });
    const onB = conversation({ created_at: '2026-04-03T00:00:00.000Z' });
    // The same conversation id in both shops stays two conversations.
    const shared = randomUUID();
    await seed(a.shopId, [onA, conversation({ id: shared, created_at: '2026-04-04T00:00:00.000Z', title: 'A' })]);
    await seed(b.shopId, [onB, conversation({ id: shared, created_at: '2026-04-04T00:00:00.000Z', title: 'B' })]);
    const seenByA = (await walk({}, a.headers)).flatMap((p) => p.results);
    expect(seenByA.map((c) => c.id)).toEqual([onA.id, shared]);
    expect(seenByA[1].title).toBe('A');
    expect(idsOf(await walk({ id: onB.id }, a.headers))).toEqual([]);
    expect(idsOf(await walk({ id__in: `${onA.id},${onB.id}` }, a.headers))).toEqual([onA.id]);
    // A's key with B's shop header: 403.
    const r = await get(exportUrl(), { ...a.headers, 'x-shop-id': b.shopId });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('forbidden');
    // No key: 401.
    expect((await get(exportUrl(), { 'x-shop-id': a.shopId })).status).toBe(401);
  });

  it('builds the links from PUBLIC_BASE_URL when it is set', async () => {
    const { shopId, headers } = await createTestShop(rt);
    await seed(shopId, [conversation({ created_at: '2026-04-05T00:00:00.000Z' }), conversation({ created_at: '2026-04-06T00:00:00.000Z' })]);
    // A second process on the same database, configured with its public address.
    const publicRt = await startTestRuntime(
      {
        DATABASE_URL: rt.env.DATABASE_URL,
        TOPIC_PREFIX: rt.env.TOPIC_PREFIX,
        EXPORT_RATE_LIMIT_PER_MINUTE: '1000000',
        PUBLIC_BASE_URL: 'https://api.example.test/',
      },
      'export-test-public',
    );
    const other = await startTestServer(publicRt, [exportService(publicRt)]);
    try {
      const r = await get(`${other.baseUrl}/v2026-04/conversations/export/?limit=1&resolution__in=hard`, headers);
      expect(r.status).toBe(200);
      expect(r.body.next).toBeNull();
      const all = await get(`${other.baseUrl}/v2026-04/conversations/export/?limit=1`, headers);
      const next = new URL(all.body.next);
      expect(`${next.origin}${next.pathname}`).toBe('https://api.example.test/v2026-04/conversations/export/');
      expect([...next.searchParams.keys()]).toEqual(['limit', 'cursor']);
    } finally {
      await other.stop();
    }
  });
  it('reads a page in at most three statements, each an index range scan on (shop_id, ...) with no sort of conversations', async () => {
    const { shopId } = await createTestShop(rt);
    const cs = Array.from({ length: 30 }, (_, i) => conversation({ created_at: new Date(Date.parse('2026-04-07T00:00:00Z') + i * 1000).toISOString() }));
    await seed(
      shopId,
      cs,
      cs.map((c) => ({ conversation_id: c.id, id: randomUUID(), created_at: c.created_at, text: 'x' })),
    );
    const o = ordered(cs);
    for (const direction of ['next', 'prev'] as const) {
      const statements: SQLQuery[] = [];
      const page = await rt.db.tx(async (tx) => {
        // A table this small would be read whole otherwise; the question is whether an index CAN serve the order.
        await tx.query(sql`SET LOCAL enable_seqscan = off`);
        await tx.query(sql`SET LOCAL enable_bitmapscan = off`);
        const capture = { query: (q: SQLQuery) => (statements.push(q), tx.query(q)) };
        const p = await fetchExportPage(capture, { filters: { shopId }, direction, after: [o[15].created_at.replace('Z', '000Z'), o[15].id], limit: 10 });
        const plans: string[] = [];
        for (const q of statements) plans.push(JSON.stringify((await tx.query(sql`EXPLAIN (FORMAT JSON) ${q}`))[0]['QUERY PLAN']));
        return { p, plans };
      });
      expect(page.p.conversations.map((c) => c.id)).toEqual((direction === 'next' ? o.slice(16, 26) : o.slice(5, 15)).map((c) => c.id));
      expect(statements.length).toBe(3);
      const [main, ...rest] = page.plans;
      expect(main).toContain('"Index Name":"conversations_export"');
      expect(main).not.toContain('"Node Type":"Sort"');
      expect(rest.join()).toContain('"Index Name":"conversation_messages_by_conversation"');
      expect(rest.join()).not.toContain('Seq Scan');
    }
  });
});

describe('GET /v2026-04/conversations/export/?updated_at__range= (incremental export)', () => {
  const T = Date.parse('2026-04-15T12:00:00.000Z');
  const iso = (ms: number) => new Date(ms).toISOString();
  /** The export's order under an updated_at window. */
  const byUpdated = (cs: ConversationData[]) =>
    cs.slice().sort((a, b) => Date.parse(a.updated_at) - Date.parse(b.updated_at) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));

  it('a conversation changed after a pass is in the next window, once; nothing unchanged comes back; pages in (updated_at, id) order', async () => {
    const { shopId, headers } = await createTestShop(rt);
    now = T;
    // Created long before any window (created_at plays no part), updated within the last two days on 9
    // distinct instants: ties broken by id.
    const cs = Array.from({ length: 25 }, (_, i) =>
      conversation({ created_at: iso(T - (100 + i) * DAY), updated_at: iso(T - 2 * DAY + (i % 9) * 3600_000), resolution: 'soft' }),
    );
    await seed(shopId, cs);
    const firstRunStart = iso(T - 3 * DAY);

    // First run: `<start>,` resolves its end to now (T) and keeps it on every page.
    const first = await page(exportUrl({ updated_at__range: `${firstRunStart},`, limit: '4' }), headers);
    const seen = first.results.map((c) => c.id);
    expect(seen).toEqual(
      byUpdated(cs)
        .slice(0, 4)
        .map((c) => c.id),
    );
    // While it pages, one conversation already seen and one not yet reached are changed (resolved) after T.
    now = T + 3600_000;
    const changedSeen = { ...cs.find((c) => c.id === seen[0])!, updated_at: iso(T + 10 * 60_000), resolution: 'hard' as const };
    const notYet = byUpdated(cs)[20];
    const changedAhead = { ...notYet, updated_at: iso(T + 20 * 60_000), resolution: 'human' as const };
    await seed(shopId, [changedSeen, changedAhead]);
    let p = first;
    while (p.next) {
      p = await page(p.next, headers);
      seen.push(...p.results.map((c) => c.id));
    }
    // Each once, in (updated_at, id) order; the one changed ahead left the pinned window (it is the next run's).
    expect(seen).toEqual(
      byUpdated(cs)
        .filter((c) => c.id !== notYet.id)
        .map((c) => c.id),
    );
    // Backward from the last page gives the same pages.
    const back: string[] = [];
    let q: Page | null = p;
    while (q) {
      back.unshift(...q.results.map((c) => c.id));
      q = q.previous ? await page(q.previous, headers) : null;
    }
    // (Without the one changed since: it left the pinned window, read as it is now.)
    expect(back).toEqual(seen.filter((id) => id !== changedSeen.id));

    // Second run: from the first run's end. Exactly the two changed, each once, in the order they changed,
    // as they are now.
    const second = await walk({ updated_at__range: `${iso(T)},`, limit: '1' }, headers);
    expect(second.flatMap((x) => x.results).map((c) => [c.id, c.resolution, c.updated_at])).toEqual([
      [changedSeen.id, 'hard', changedSeen.updated_at],
      [changedAhead.id, 'human', changedAhead.updated_at],
    ]);
  });

  it('ANDs with the other filters, created_at__range included, and keeps the (updated_at, id) order', async () => {
    const { shopId, headers } = await createTestShop(rt);
    now = T;
    const agent = randomUUID();
    // Created in the opposite order to their updates.
    const cs = [0, 1, 2, 3, 4, 5].map((i) =>
      conversation({ created_at: iso(T - (10 - i) * DAY), updated_at: iso(T - DAY + (5 - i) * 3600_000), agent_id: i % 2 === 0 ? agent : null }),
    );
    await seed(shopId, cs);
    const window = `${iso(T - 2 * DAY)},${iso(T)}`;
    expect(idsOf(await walk({ updated_at__range: window }, headers))).toEqual([5, 4, 3, 2, 1, 0].map((i) => cs[i].id));
    // Created in [T-9d, T-6d): cs[1], cs[2], cs[3]; in updated order.
    expect(idsOf(await walk({ updated_at__range: window, created_at__range: `${iso(T - 9 * DAY)},${iso(T - 6 * DAY)}`, limit: '1' }, headers))).toEqual(
      [3, 2, 1].map((i) => cs[i].id),
    );
    expect(idsOf(await walk({ updated_at__range: window, agent_id: agent }, headers))).toEqual([4, 2, 0].map((i) => cs[i].id));
    // Half-open on updated_at: cs[5] is at T-1d exactly (in), cs[0] at T-1d+5h (out when the end is there).
    expect(idsOf(await walk({ updated_at__range: `${iso(T - DAY)},${iso(T - DAY + 5 * 3600_000)}` }, headers))).toEqual([5, 4, 3, 2, 1].map((i) => cs[i].id));
    // The relative form resolves against now like the other ranges.
    expect(idsOf(await walk({ updated_at__range: 'relative:-20h,relative:-19h' }, headers))).toEqual([cs[1].id]);
  });

  it('pins its window and order in the cursor: one made without it, or with another window, is a 400 invalid_cursor', async () => {
    const { shopId, headers } = await createTestShop(rt);
    now = T;
    await seed(
      shopId,
      [0, 1, 2].map((i) => conversation({ created_at: iso(T - 5 * DAY + i * 1000), updated_at: iso(T - DAY + i * 1000) })),
    );
    const plain = await page(exportUrl({ limit: '1' }), headers);
    const withUpdated = new URL(plain.next!);
    withUpdated.searchParams.set('updated_at__range', 'relative:-7d,');
    const incremental = await page(exportUrl({ updated_at__range: 'relative:-7d,', limit: '1' }), headers);
    const otherWindow = new URL(incremental.next!);
    otherWindow.searchParams.set('updated_at__range', 'relative:-6d,');
    const dropped = new URL(incremental.next!);
    dropped.searchParams.delete('updated_at__range');
    for (const u of [withUpdated, otherWindow, dropped]) {
      const r = await get(u.toString(), headers);
      expect(r.status, u.toString()).toBe(400);
      expect(r.body.error.code).toBe('invalid_cursor');
    }
    // Its own link repeats the parameter as written and keeps the first request's bounds.
    expect(new URL(incremental.next!).searchParams.get('updated_at__range')).toBe('relative:-7d,');
    now = T + 30 * DAY;
    expect((await page(incremental.next!, headers)).results).toHaveLength(1);
  });

  it('reads a page by an index range scan of (shop_id, updated_at, id), with no sort of conversations', async () => {
    const { shopId } = await createTestShop(rt);
    const cs = Array.from({ length: 30 }, (_, i) => conversation({ created_at: iso(T - (i + 1) * DAY), updated_at: iso(T - DAY + i * 1000) }));
    await seed(shopId, cs);
    const o = byUpdated(cs);
    const updatedAt = { start: (T - 2 * DAY) * 1000, end: T * 1000 };
    for (const direction of ['next', 'prev'] as const) {
      const r = await rt.db.tx(async (tx) => {
        await tx.query(sql`SET LOCAL enable_seqscan = off`);
        await tx.query(sql`SET LOCAL enable_bitmapscan = off`);
        const statements: SQLQuery[] = [];
        const capture = { query: (q: SQLQuery) => (statements.push(q), tx.query(q)) };
        const p = await fetchExportPage(capture, {
          filters: { shopId, updatedAt },
          direction,
          after: [o[15].updated_at.replace('Z', '000Z'), o[15].id],
          limit: 10,
        });
        return { p, plan: JSON.stringify((await tx.query(sql`EXPLAIN (FORMAT JSON) ${statements[0]}`))[0]['QUERY PLAN']) };
      });
      expect(r.p.conversations.map((c) => c.id)).toEqual((direction === 'next' ? o.slice(16, 26) : o.slice(5, 15)).map((c) => c.id));
      expect(r.plan).toContain('"Index Name":"conversations_export_updated"');
      expect(r.plan).not.toContain('"Node Type":"Sort"');
    }
  });
});
