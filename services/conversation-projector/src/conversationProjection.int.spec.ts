import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '@shopstream/db';
import type { ConversationData, ConversationRecord } from '@shopstream/contracts';
import { projectionSpec, raw, type ProjectionSpec } from '@shopstream/harness/projectionSpec';
import { conversationUpserted, messageCreated } from '@shopstream/testkit';
import { conversationProjection } from './conversationProjection.js';

const shop = '0190a2c4-0000-7000-8000-00000000000b';
const convo = '0190a2c4-0000-7000-8000-0000000000a1';
const msg = (n: number) => `0190a2c4-0000-7000-8000-0000000000e${n}`;

/** A version of the one conversation, created at 09:00 and updated at `updatedAt`. */
const upserted = (updatedAt: string, over: Partial<ConversationData> = {}) =>
  conversationUpserted(shop, { id: convo, created_at: '2026-01-01T09:00:00.000Z', updated_at: updatedAt, ...over });
const message = (n: number, createdAt: string, text: string) => messageCreated(shop, convo, { id: msg(n), created_at: createdAt, text });

let spec: ProjectionSpec<ConversationRecord>;
beforeAll(async () => {
  spec = await projectionSpec(conversationProjection);
});
afterAll(async () => {
  await spec?.close();
});

const conversations = sql`SELECT id, title, updated_at, last_message_at, last_message_content, last_message_id FROM conversations ORDER BY id`;

describe('conversation projection (given conversations records, when applied, then the export read model)', () => {
  it('keeps the newest version of a conversation, whatever order the versions come in, within a batch or across', async () => {
    await spec
      .given(upserted('2026-01-01T09:05:00.000Z', { title: 'newer' }), upserted('2026-01-01T09:04:59.999Z', { title: 'older in the same batch' }))
      .when(upserted('2026-01-01T09:01:00.000Z', { title: 'older' }))
      .then(async ({ rows, emitted }) => {
        expect(await rows(conversations)).toEqual([
          {
            id: convo,
            title: 'newer',
            updated_at: new Date('2026-01-01T09:05:00.000Z'),
            last_message_at: null,
            last_message_content: null,
            last_message_id: null,
          },
        ]);
        expect(emitted).toEqual([]);
      });
  });

  it('shows the newest message of a conversation once the conversation comes, even when its messages came first', async () => {
    await spec
      .given(message(1, '2026-01-01T09:10:00.000Z', 'first'), message(2, '2026-01-01T09:20:00.000Z', 'second'))
      .when(upserted('2026-01-01T09:15:00.000Z', { title: 'late', last_message_at: '2026-01-01T09:00:30.000Z', last_message_content: 'from the record' }))
      .then(async ({ rows }) => {
        expect(await rows(conversations)).toEqual([
          {
            id: convo,
            title: 'late',
            updated_at: new Date('2026-01-01T09:15:00.000Z'),
            last_message_at: new Date('2026-01-01T09:20:00.000Z'),
            last_message_content: 'second',
            last_message_id: msg(2),
          },
        ]);
        expect(await rows(sql`SELECT id, text FROM conversation_messages ORDER BY created_at`)).toEqual([
          { id: msg(1), text: 'first' },
          { id: msg(2), text: 'second' },
        ]);
      });
  });

  it('writes a message once: a second record with its id changes nothing', async () => {
    await spec
      .given(upserted('2026-01-01T09:00:00.000Z'), message(3, '2026-01-01T09:30:00.000Z', 'original'))
      .when(message(3, '2026-01-01T09:40:00.000Z', 'rewritten'))
      .then(async ({ rows }) => {
        expect(await rows(sql`SELECT id, created_at, text FROM conversation_messages`)).toEqual([
          { id: msg(3), created_at: new Date('2026-01-01T09:30:00.000Z'), text: 'original' },
        ]);
        expect((await rows(conversations)).map((r) => r.last_message_content)).toEqual(['original']);
      });
  });

  it('rejects undecodable records and records of an unknown type', async () => {
    await spec.given(raw('not json'), raw(JSON.stringify({ type: 'conversation.deleted', shop_id: shop }))).then(async ({ rows, rejected, applied }) => {
      expect(applied).toBe(0);
      expect(rejected.map((r) => r.reason.split(':')[0])).toEqual(['invalid JSON', 'schema']);
      expect(await rows(conversations)).toEqual([]);
    });
  });
});
