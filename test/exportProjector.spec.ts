import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conversationsTopic, headers as H, type ConversationData, type ConversationRecord } from '@shopstream/contracts';
import { queryRow, sql } from '@shopstream/db';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { startConversationProjector } from '@shopstream/conversation-projector';
import { json, readTopic, startTestRuntime, waitFor } from '@shopstream/harness';

/** Given these records on the conversations topic, when the projector has consumed them, then these rows exist. */

let rt: Runtime;
let projector: StartedService;

const out = (r: ConversationRecord) => conversationsTopic.record(r);
const publish = (records: ConversationRecord[]) => rt.bus.publish(rt.topics.conversations, records.map(out));

function conversation(id: string, over: Partial<ConversationData> = {}): ConversationData {
  return {
    id,
    agent_id: null,
    contact_id: null,
    user_id: null,
    created_at: '2026-03-01T10:00:00.000Z',
    updated_at: '2026-03-01T10:00:00.000Z',
    flags: [],
    tags: [],
    intent: {},
    topic: {},
    type: 'web_chat',
    ...over,
  };
}
const upsert = (shop: string, c: ConversationData): ConversationRecord => ({ type: 'conversation.upserted', shop_id: shop, conversation: c });
const message = (shop: string, conversationId: string, id: string, createdAt: string, text: string): ConversationRecord => ({
  type: 'message.created',
  shop_id: shop,
  conversation_id: conversationId,
  message: { id, created_at: createdAt, text },
});

async function row(shop: string, id: string) {
  const rows = await rt.db.query(sql`
    SELECT title, updated_at, last_message_at, last_message_content, status FROM conversations WHERE shop_id = ${shop} AND id = ${id}`);
  return rows[0] as
    { title: string | null; updated_at: Date; last_message_at: Date | null; last_message_content: string | null; status: string | null } | undefined;
}
const messageIds = async (shop: string, conversationId: string) =>
  (await rt.db.query(sql`SELECT id FROM conversation_messages WHERE shop_id = ${shop} AND conversation_id = ${conversationId} ORDER BY created_at, id`)).map(
    (r) => r.id as string,
  );

beforeAll(async () => {
  rt = await startTestRuntime({}, 'conversation-projector-test');
  projector = await startConversationProjector(rt);
});
afterAll(async () => {
  await projector?.stop();
  await rt?.close();
});

describe('conversation-projector', () => {
  it('applies an upsert only when its updated_at is not older than the stored one', async () => {
    const shop = randomUUID();
    const id = randomUUID();
    const marker = randomUUID();
    await publish([
      upsert(shop, conversation(id, { updated_at: '2026-03-01T10:05:00.000Z', title: 'v2', status: 'open' })),
      upsert(shop, conversation(id, { updated_at: '2026-03-01T10:01:00.000Z', title: 'v1 (older, arrives late)', status: 'new' })),
      upsert(shop, conversation(id, { updated_at: '2026-03-01T10:05:00.000Z', title: 'v2 again (same updated_at)', status: 'pending' })),
      upsert(shop, conversation(marker)),
    ]);
    await waitFor(() => row(shop, marker), { message: 'marker conversation projected' });
    const r = await row(shop, id);
    expect(r?.title).toBe('v2 again (same updated_at)');
    expect(r?.status).toBe('pending');
    expect(r?.updated_at.toISOString()).toBe('2026-03-01T10:05:00.000Z');

    // In separate batches too: an older version published later changes nothing.
    await publish([upsert(shop, conversation(id, { updated_at: '2026-03-01T10:04:59.999Z', title: 'stale' }))]);
    const marker2 = randomUUID();
    await publish([upsert(shop, conversation(marker2))]);
    await waitFor(() => row(shop, marker2), { message: 'second marker projected' });
    expect((await row(shop, id))?.title).toBe('v2 again (same updated_at)');
  });

  it('compares updated_at to the microsecond, also between two versions in one batch', async () => {
    const shop = randomUUID();
    const id = randomUUID();
    const marker = randomUUID();
    await publish([
      upsert(shop, conversation(id, { updated_at: '2026-03-01T10:05:00.000002Z', title: 'newer by 1 µs' })),
      upsert(shop, conversation(id, { updated_at: '2026-03-01T10:05:00.000001Z', title: 'older by 1 µs, later in the batch' })),
      upsert(shop, conversation(marker)),
    ]);
    await waitFor(() => row(shop, marker), { message: 'marker conversation projected' });
    expect((await row(shop, id))?.title).toBe('newer by 1 µs');
    const [{ updated_at }] = await rt.db.query(
      sql`SELECT to_char(updated_at, 'SS.US') AS updated_at FROM conversations WHERE shop_id = ${shop} AND id = ${id}`,
    );
    expect(updated_at).toBe('00.000002');
  });

  it('keeps messages that arrive before their conversation and shows the newest once the conversation comes', async () => {
    const shop = randomUUID();
    const id = randomUUID();
    const [m1, m2, m3] = [randomUUID(), randomUUID(), randomUUID()];
    await publish([message(shop, id, m2, '2026-03-01T10:20:00.000Z', 'second'), message(shop, id, m1, '2026-03-01T10:10:00.000Z', 'first')]);
    await waitFor(async () => (await messageIds(shop, id)).length === 2, { message: 'early messages stored' });
    expect(await row(shop, id)).toBeUndefined();

    // The record's own last_message_* are older than the newest message: the message wins.
    await publish([upsert(shop, conversation(id, { last_message_at: '2026-03-01T10:15:00.000Z', last_message_content: 'from the record' }))]);
    await waitFor(() => row(shop, id), { message: 'conversation projected' });
    let r = await row(shop, id);
    expect(r?.last_message_at?.toISOString()).toBe('2026-03-01T10:20:00.000Z');
    expect(r?.last_message_content).toBe('second');

    // An older message changes nothing; a newer one takes over.
    await publish([message(shop, id, m3, '2026-03-01T10:00:00.000Z', 'zeroth')]);
    await waitFor(async () => (await messageIds(shop, id)).length === 3, { message: 'older message stored' });
    r = await row(shop, id);
    expect(r?.last_message_content).toBe('second');
    const m4 = randomUUID();
    await publish([message(shop, id, m4, '2026-03-01T11:00:00.000Z', 'latest')]);
    await waitFor(async () => (await row(shop, id))?.last_message_content === 'latest', { message: 'newest message shown' });
    expect((await row(shop, id))?.last_message_at?.toISOString()).toBe('2026-03-01T11:00:00.000Z');

    // A newer version of the conversation that knows of no message keeps what the messages say.
    await publish([upsert(shop, conversation(id, { updated_at: '2026-03-01T12:00:00.000Z', title: 'renamed' }))]);
    await waitFor(async () => (await row(shop, id))?.title === 'renamed', { message: 'renamed' });
    r = await row(shop, id);
    expect(r?.last_message_content).toBe('latest');
    expect(r?.last_message_at?.toISOString()).toBe('2026-03-01T11:00:00.000Z');
    expect(await messageIds(shop, id)).toEqual([m3, m1, m2, m4]);
  });

  it('inserts a message once by id, and keeps shops apart', async () => {
    const [shopA, shopB] = [randomUUID(), randomUUID()];
    const id = randomUUID();
    const m = randomUUID();
    await publish([
      upsert(shopA, conversation(id, { title: 'A' })),
      upsert(shopB, conversation(id, { title: 'B' })),
      message(shopA, id, m, '2026-03-01T10:10:00.000Z', 'once'),
      message(shopA, id, m, '2026-03-01T10:30:00.000Z', 'the same id again'),
    ]);
    await waitFor(async () => (await row(shopB, id)) && (await row(shopA, id))?.last_message_content, { message: 'both shops projected' });
    expect(await messageIds(shopA, id)).toEqual([m]);
    expect(await messageIds(shopB, id)).toEqual([]);
    expect((await row(shopA, id))?.last_message_content).toBe('once');
    expect((await row(shopB, id))?.title).toBe('B');
    expect((await row(shopB, id))?.last_message_content).toBeNull();
  });

  it('sends a record that fails the contract to conversations.dlq and goes on', async () => {
    const shop = randomUUID();
    const after = randomUUID();
    await rt.bus.publish(rt.topics.conversations, [
      { key: shop, value: JSON.stringify({ type: 'conversation.upserted', shop_id: shop, conversation: { id: 'not-a-uuid' } }) },
      { key: shop, value: 'not json' },
    ]);
    await publish([upsert(shop, conversation(after))]);
    await waitFor(() => row(shop, after), { message: 'record after the bad ones projected' });
    const dead = await readTopic(rt, rt.topics.dlq(rt.topics.conversations), (rs) => rs.filter((r) => r.key === shop).length >= 2);
    // Dead letters are at least once: a re-delivered batch may send one again. One per source offset counts.
    const bySource = new Map(dead.filter((r) => r.key === shop).map((r) => [r.headers[H.dlqSourceOffset], r]));
    const mine = [...bySource.values()];
    expect(mine.map((r) => r.headers[H.dlqReason].split(':')[0]).sort()).toEqual(['invalid JSON', 'schema']);
    expect(mine.map((r) => r.value.toString()).includes('not json')).toBe(true);
    expect(json(mine.find((r) => r.value.toString() !== 'not json')!).conversation.id).toBe('not-a-uuid');
  });

  it('re-delivering the whole topic (a fresh consumer group) leaves the read model exactly as it was', async () => {
    const snapshot = async () => ({
      conversations: await rt.db.query(sql`SELECT * FROM conversations ORDER BY shop_id, id`),
      messages: await rt.db.query(sql`SELECT * FROM conversation_messages ORDER BY shop_id, id`),
    });
    const before = await snapshot();
    expect(before.conversations.length).toBeGreaterThan(5);
    // Same database, same topic, another group: every record is delivered and applied a second time.
    const replayRt = await startTestRuntime(
      { DATABASE_URL: rt.env.DATABASE_URL, TOPIC_PREFIX: rt.env.TOPIC_PREFIX, CONSUMER_GROUP_PREFIX: 'replay.' },
      'conversation-projector-replay',
    );
    const replay = await startConversationProjector(replayRt);
    try {
      // One row always (an aggregate): 0 when the groups have no offsets yet.
      const offsets = async (groups: string) =>
        (await queryRow(rt.db, sql`SELECT coalesce(sum(next_offset), 0)::int AS n FROM projection_offsets WHERE group_id LIKE ${groups}`, (r) =>
          Number(r.n),
        )) ?? 0;
      const total = await offsets('shopstream.%');
      await waitFor(
        async () => {
          return (await offsets('replay.conversation-projector')) >= total;
        },
        { message: 'replay caught up' },
      );
      expect(await snapshot()).toEqual(before);
    } finally {
      await replay.stop();
      await replayRt.close();
    }
  });
});
