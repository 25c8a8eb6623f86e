import { createHash, randomUUID } from 'node:crypto';
import {
  conversationResolutions,
  conversationStatuses,
  conversationTypes,
  isUuid,
  type ConversationRecord,
  type ConversationData,
} from '@shopstream/contracts';
import { intOption, parse, UsageError, type Command } from '../args.js';
import { withRuntime } from '../context.js';
import { cliIo } from '../io.js';
import { progress, PROGRESS_HELP, PROGRESS_OPTION } from '../progress.js';
import { sealingPublisher } from './conversations.js';

/** A stable uuid for a name, so a topic or an agent keeps its id from one seeding to the next. */
function nameUuid(name: string): string {
  const h = createHash('sha1').update(`shopstream-seed:${name}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-${((parseInt(h[16], 16) & 3) | 8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

const topics: Record<string, string[]> = {
  Shipping: ['Where is my order', 'Delivery delayed', 'Change shipping address'],
  Returns: ['Start a return', 'Refund status', 'Exchange an item'],
  Billing: ['Double charge', 'Update payment method', 'Invoice request'],
  Product: ['Size advice', 'Product availability', 'Care instructions'],
  Account: ['Reset password', 'Delete my account', 'Change email'],
  Promotions: ['Discount code not working', 'Loyalty points'],
};
const topicRefs = Object.entries(topics).map(([name, intents]) => ({
  topic: { id: nameUuid(`topic:${name}`), name },
  intents: intents.map((i) => ({ id: nameUuid(`intent:${name}:${i}`), name: i })),
}));
const flagRefs = ['Needs review', 'Wrong answer', 'Customer upset', 'Compliment', 'Policy exception'].map((name) => ({ id: nameUuid(`flag:${name}`), name }));
const tagPool = ['vip', 'first-order', 'wholesale', 'eu', 'us', 'mobile', 'repeat-customer', 'gift', 'urgent', 'follow-up'];
const customerLines = [
  'Hi, my order has not arrived yet.',
  'Can I change the size of the jacket I ordered?',
  'The discount code SPRING20 says it is invalid.',
  'I was charged twice for the same order.',
  'How do I start a return?',
  'Is the blue version back in stock soon?',
  'Thanks, that solved it!',
  'Could you send me the invoice for order 10482?',
];
const agentLines = [
  'Thanks for reaching out! Let me look into that for you.',
  'I can see your parcel is with the carrier and due tomorrow.',
  'I have refunded the duplicate charge; it shows in 3 to 5 days.',
  'Here is your return label; drop it at any post office.',
  'I have updated the address on your order.',
  'Is there anything else I can help you with?',
];
const agents = Array.from({ length: 25 }, (_, i) => nameUuid(`agent:${i}`));
const users = Array.from({ length: 8 }, (_, i) => nameUuid(`user:${i}`));

const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)];
const some = <T>(xs: readonly T[], max: number): T[] => [...new Set(Array.from({ length: Math.floor(Math.random() * (max + 1)) }, () => pick(xs)))];
const iso = (ms: number) => new Date(ms).toISOString();

/** One conversation and its messages. i cycles through every type, resolution and status. */
export function syntheticConversation(shopId: string, i: number, messages: number, now: number, spanMs: number, contacts: string[]): ConversationRecord[] {
  const created = now - Math.floor(Math.random() * spanMs);
  const type = conversationTypes[i % conversationTypes.length];
  // One slot beyond each list: "none", since those fields are optional.
  const resolution = [...conversationResolutions, undefined][i % (conversationResolutions.length + 1)];
  const status = [...conversationStatuses, undefined][Math.floor(i / 3) % (conversationStatuses.length + 1)];
  const t = i % 7 === 6 ? null : pick(topicRefs);
  const id = randomUUID();
  const msgs: ConversationRecord[] = [];
  let at = created + 5_000;
  for (let j = 0; j < messages; j++) {
    at += 10_000 + Math.floor(Math.random() * 30 * 60_000);
    msgs.push({
      type: 'message.created',
      shop_id: shopId,
      conversation_id: id,
      message: { id: randomUUID(), created_at: iso(at), text: j % 2 === 0 ? pick(customerLines) : pick(agentLines) },
    });
  }
  const resolvedAt = resolution ? at + 60_000 : null;
  const escalated = resolution === 'escalated' || resolution === 'human';
  const conversation: ConversationData = {
    id,
    agent_id: i % 10 === 9 ? null : pick(agents),
    contact_id: i % 20 === 19 ? null : pick(contacts),
    user_id: i % 4 === 0 ? pick(users) : null,
    created_at: iso(created),
    updated_at: iso(Math.max(at, resolvedAt ?? 0)),
    escalation_time: escalated ? iso(created + 120_000) : null,
    start_time: iso(created + 1_000),
    resolved_at: resolvedAt === null ? null : iso(resolvedAt),
    ...(t ? { title: `${t.topic.name}: ${pick(t.intents).name}` } : {}),
    ...(i % 3 === 0 ? { summary: 'Customer asked for help; the agent resolved it with the order details at hand.' } : {}),
    flags: i % 5 === 0 ? some(flagRefs, 2) : [],
    tags: some(tagPool, 3),
    intent: t ? pick(t.intents) : {},
    topic: t ? t.topic : {},
    ...(resolution ? { resolution } : {}),
    ...(status ? { status } : {}),
    type,
  };
  return [{ type: 'conversation.upserted', shop_id: shopId, conversation }, ...msgs];
}

function parseSeed(args: string[]): { shop: string; count: number; messages: number; months: number; progress: boolean } {
  const { values, positionals } = parse(
    args,
    { shop: { type: 'string' }, count: { type: 'string' }, messages: { type: 'string' }, months: { type: 'string' }, ...PROGRESS_OPTION },
    true,
  );
  if (positionals.length !== 1 || positionals[0] !== 'conversations') throw new UsageError('Say what to seed: conversations.');
  const shop = values.shop?.trim().toLowerCase() ?? '';
  if (!isUuid(shop)) throw new UsageError('--shop must be a uuid.');
  return {
    shop,
    count: intOption('count', values.count, 1),
    messages: intOption('messages', values.messages, 0, 5),
    months: intOption('months', values.months, 1, 6),
    progress: values.progress === true,
  };
}

/** On a terminal a bar; off it, with --progress, a plain line every 5 s and one at the end. */
function progressBar(total: number, lines: boolean) {
  const started = Date.now();
  const bar = progress({ lines });
  const tty = cliIo().stderr.isTTY === true;
  const line = (done: number) => {
    const secs = (Date.now() - started) / 1000;
    const rate = secs > 0 ? Math.round(done / secs) : 0;
    const pct = Math.floor((done / total) * 100);
    if (!tty) return `${pct}% ${done}/${total} conversations, ${rate}/s`;
    const width = 30;
    const filled = Math.round((done / total) * width);
    return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${pct}% ${done}/${total} conversations, ${rate}/s`;
  };
  return {
    update: (done: number) => bar.update(() => line(done)),
    finish: (done: number) => bar.done(line(done)),
  };
}

export const command: Command = {
  usage: `Usage: pnpm cli seed conversations --shop <uuid> --count <n> [--messages <m>] [--months <k>] [--progress]

Publishes <n> realistic synthetic conversations for the shop to the conversations topic (as
conversation.upserted records, each followed by its <m> message.created records; default 5), with every
type, resolution and status, flags, tags, topics and intents, created_at spread over the last <k> months
(default 6). The conversation-projector (pnpm start) builds the export read model from them. A conversation
with a contact, and its messages, are sealed under the contact's data key (docs/privacy.md).
A progress bar goes to stderr on a terminal. ${PROGRESS_HELP}`,
  async run(args) {
    const { shop, count, messages, months, progress: lines } = parseSeed(args);
    const contacts = Array.from({ length: Math.max(1, Math.min(100_000, Math.ceil(count / 3))) }, () => randomUUID());
    const started = Date.now();
    const records = await withRuntime(async (rt) => {
      const publisher = await sealingPublisher(rt);
      const bar = progressBar(count, lines);
      const now = Date.now();
      const spanMs = months * 30 * 24 * 3600 * 1000;
      let n = 0;
      for (let i = 0; i < count; i++) {
        for (const r of syntheticConversation(shop, i, messages, now, spanMs, contacts)) {
          await publisher.add(r);
          n++;
        }
        bar.update(i + 1);
      }
      await publisher.close();
      bar.finish(count);
      return n;
    });
    const secs = (Date.now() - started) / 1000;
    console.log(
      `Published ${count} conversations (${records} records) for shop ${shop} in ${secs.toFixed(1)} s. The conversation-projector makes them exportable.`,
    );
    return 0;
  },
};
