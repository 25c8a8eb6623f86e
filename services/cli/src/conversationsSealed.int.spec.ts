import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BusRecord } from '@shopstream/bus';
import { headers as H, schemas } from '@shopstream/contracts';
import { sql } from '@shopstream/db';
import { serviceFactories } from '@shopstream/all-in-one';
import { cliEnv, createTestShop, json, readTopic, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { conversationWithMessage } from '@shopstream/testkit';
import { runCliCaptured } from './runCli.js';

/**
 * Issue 24, item 2, for the CLI's writers of `conversations`: `pnpm cli conversations import` and `seed` seal a
 * conversation with a contact, and its messages, under the contact's data key (conversation-record.v2), so the
 * raw records hold none of their text; the conversation projector opens them; an erasure takes them from the
 * export, and a rebuild brings nothing back. Real broker and PostgreSQL; the CLI runs in this process (runCli).
 */
let rt: Runtime;
let server: TestServer;
let shop: Awaited<ReturnType<typeof createTestShop>>;
let dir: string;
const started: StartedService[] = [];

beforeAll(async () => {
  rt = await startTestRuntime({ ERASURE_POLL_MS: '200' }, 'cli-sealed');
  started.push(await serviceFactories['query-api'](rt), await serviceFactories['conversation-projector'](rt));
  server = await startTestServer(rt, started);
  shop = await createTestShop(rt);
  dir = mkdtempSync(path.join(tmpdir(), 'cli-sealed-'));
});

afterAll(async () => {
  await server?.stop();
  await rt?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const cli = (...args: string[]) => runCliCaptured(args, cliEnv(rt));
const mine = (rs: BusRecord[]) => rs.filter((r) => r.key?.toString() === shop.shopId);
const exportOf = async (contactId: string) => {
  const res = await fetch(
    `${server.baseUrl}/v2026-04/conversations/export/?contact_id=${contactId}&created_at__range=2026-03-20T00:00:00Z,2026-04-10T00:00:00Z`,
    { headers: shop.headers },
  );
  expect(res.status).toBe(200);
  return ((await res.json()) as { results: { id: string; title?: string; summary?: string; messages: { text: string }[] }[] }).results;
};

describe('the CLI seals the conversations it writes', () => {
  const contactId = randomUUID();
  const bystanderId = randomUUID();
  const secret = `secret-${randomUUID().slice(0, 8)}`;

  it('conversations import: no text of a conversation with a contact in plaintext; the projector opens it; an erasure and a rebuild', async () => {
    const [conv, msg] = conversationWithMessage(shop.shopId, {
      at: '2026-04-01T10:00:00Z',
      text: `Hello, I am ${secret}`,
      contact_id: contactId,
      title: `Title ${secret}`,
      summary: `Summary ${secret}`,
      last_message_content: `Hello, I am ${secret}`,
    });
    const [other, otherMsg] = conversationWithMessage(shop.shopId, { at: '2026-04-01T11:00:00Z', text: 'bystander text', contact_id: bystanderId });
    // A conversation without a contact names no person: written as it is.
    const [anon, anonMsg] = conversationWithMessage(shop.shopId, { at: '2026-04-01T12:00:00Z', text: 'anonymous text' });
    const file = path.join(dir, 'import.jsonl');
    writeFileSync(file, [conv, msg, other, otherMsg, anon, anonMsg].map((r) => JSON.stringify(r)).join('\n') + '\n');
    const r = await cli('conversations', 'import', file);
    expect(r.stderr).toBe('');
    expect([r.code, r.stdout.trim()]).toEqual([0, 'Published 6 record(s) to the conversations topic; 0 bad line(s) skipped.']);

    const records = mine(await readTopic(rt, rt.topics.conversations, (rs) => mine(rs).length >= 6));
    expect(records).toHaveLength(6);
    for (const rec of records) {
      expect(rec.value.toString('utf8')).not.toContain(secret);
      expect(rec.value.toString('utf8')).not.toContain('bystander text');
      expect(rec.headers[H.schema]).toBe(schemas.conversationRecordV2);
    }
    const values = records.map((rec) => json(rec));
    expect(values.filter((v) => v.sealed).map((v) => v.type)).toEqual(['conversation.upserted', 'message.created', 'conversation.upserted', 'message.created']);
    expect(values[1]).toMatchObject({ contact_id: contactId, message: { id: msg.message.id }, sealed: { alg: 'A256GCM' } });
    expect(values[1].message.text).toBeUndefined();
    expect(values[4]).toEqual(anon);
    expect(values[5]).toEqual(anonMsg);

    // The projector opens them: the export shows the text.
    await waitFor(async () => (await exportOf(contactId)).length === 1 && (await exportOf(bystanderId)).length === 1, { message: 'projected' });
    expect((await exportOf(contactId))[0]).toMatchObject({
      title: `Title ${secret}`,
      summary: `Summary ${secret}`,
      messages: [{ text: `Hello, I am ${secret}` }],
    });

    const erased = await cli('privacy', 'erase', '--shop', shop.shopId, '--contact-id', contactId);
    expect(erased.code).toBe(0);
    expect(await exportOf(contactId)).toEqual([]);
    expect(
      Number(
        (
          await rt.db.query(sql`SELECT count(*) AS n FROM conversation_messages WHERE shop_id = ${shop.shopId} AND conversation_id = ${conv.conversation.id}`)
        )[0].n,
      ),
    ).toBe(0);

    const rebuilt = await cli('projections', 'rebuild', 'conversation-projector', '--yes');
    expect(rebuilt.code).toBe(0);
    expect(rebuilt.stderr).toContain('switched');
    expect(await exportOf(contactId)).toEqual([]);
    expect(Number((await rt.db.query(sql`SELECT count(*) AS n FROM conversations WHERE shop_id = ${shop.shopId} AND contact_id = ${contactId}`))[0].n)).toBe(0);
    expect(
      Number(
        (
          await rt.db.query(sql`SELECT count(*) AS n FROM conversation_messages WHERE shop_id = ${shop.shopId} AND conversation_id = ${conv.conversation.id}`)
        )[0].n,
      ),
    ).toBe(0);
    // The bystander and the anonymous conversation are untouched.
    expect((await exportOf(bystanderId))[0]).toMatchObject({ id: other.conversation.id, messages: [{ text: 'bystander text' }] });
    expect(Number((await rt.db.query(sql`SELECT count(*) AS n FROM conversations WHERE shop_id = ${shop.shopId} AND id = ${anon.conversation.id}`))[0].n)).toBe(
      1,
    );
  });

  it('conversations import: a message whose conversation came in an earlier import is sealed under its contact key too', async () => {
    const [, later] = conversationWithMessage(shop.shopId, { at: '2026-04-01T10:00:00Z', text: `later ${secret}` });
    const other = await exportOf(bystanderId);
    const message = { ...later, conversation_id: other[0].id };
    const file = path.join(dir, 'later.jsonl');
    writeFileSync(file, JSON.stringify(message) + '\n');
    const r = await cli('conversations', 'import', file);
    expect([r.code, r.stderr]).toEqual([0, '']);
    const records = mine(await readTopic(rt, rt.topics.conversations, (rs) => mine(rs).some((x) => json(x).message?.id === later.message.id)));
    const rec = records.find((x) => json(x).message?.id === later.message.id)!;
    expect(rec.value.toString('utf8')).not.toContain(secret);
    expect(json(rec)).toMatchObject({ contact_id: bystanderId, sealed: { alg: 'A256GCM' } });
    await waitFor(async () => (await exportOf(bystanderId))[0]?.messages.some((m) => m.text === `later ${secret}`), { message: 'the later message projected' });
  });

  it('seed conversations: every record of a conversation with a contact is sealed', async () => {
    const seeded = await createTestShop(rt);
    const r = await cli('seed', 'conversations', '--shop', seeded.shopId, '--count=20', '--messages=2');
    expect(r.code).toBe(0);
    const ofShop = (rs: BusRecord[]) => rs.filter((x) => x.key?.toString() === seeded.shopId);
    const records = ofShop(await readTopic(rt, rt.topics.conversations, (rs) => ofShop(rs).length >= 60));
    expect(records).toHaveLength(60);
    const values = records.map((x) => json(x));
    const withContact = values.filter((v) => v.type === 'conversation.upserted' && v.conversation.contact_id);
    // syntheticConversation: one conversation in 20 has no contact.
    expect(withContact.length).toBe(19);
    for (const v of values) {
      const ofContact =
        v.type === 'conversation.upserted'
          ? v.conversation.contact_id !== null
          : values.some((c) => c.conversation?.id === v.conversation_id && c.conversation.contact_id);
      if (ofContact) {
        expect(v.sealed).toMatchObject({ alg: 'A256GCM' });
        expect(v.message?.text).toBeUndefined();
        expect(v.conversation?.title).toBeUndefined();
      } else expect(v.sealed).toBeUndefined();
    }
    // The projector opens them all: every message's text is back.
    await waitFor(
      async () => Number((await rt.db.query(sql`SELECT count(*) AS n FROM conversation_messages WHERE shop_id = ${seeded.shopId} AND text <> ''`))[0].n) === 40,
      { message: 'the seeded conversations projected' },
    );
  });
});
