import { z } from 'zod';
import { rfc3339, storableTime } from './events.js';
import { sealedPart } from './records.js';

export const conversationResolutions = ['hard', 'soft', 'escalated', 'human', 'merged'] as const;
export type ConversationResolution = (typeof conversationResolutions)[number];

export const conversationStatuses = ['new', 'open', 'pending'] as const;
export type ConversationStatus = (typeof conversationStatuses)[number];

export const conversationTypes = ['phone_call', 'web_call', 'web_call_demo', 'video_call', 'web_chat', 'email', 'sms', 'comments', 'form'] as const;
export type ConversationType = (typeof conversationTypes)[number];

const named = (id: string) => z.object({ id: z.uuid(), name: z.string() }).meta({ id });

export const flagSchema = named('Flag');
export const intentSchema = named('Intent');
export const topicSchema = named('Topic');

/** `{}` when the conversation has none: the interface calls the object required but possibly empty. */
const namedOrEmpty = (s: typeof intentSchema) => z.union([s, z.strictObject({})]);

export const messageSchema = z.object({ id: z.uuid(), created_at: storableTime, text: z.string() }).meta({ id: 'Message' });
export type Message = z.infer<typeof messageSchema>;

/**
 * Every field of the interface's Conversation but `messages`. Fields typed "or null" are nullable;
 * the producer may leave them out (read as null). The others that are not required may be left out.
 */
const conversationFields = {
  id: z.uuid(),
  agent_id: z.uuid().nullable(),
  contact_id: z.uuid().nullable(),
  user_id: z.uuid().nullable(),
  created_at: storableTime,
  updated_at: storableTime,
  escalation_time: storableTime.nullable().optional(),
  start_time: storableTime.nullable().optional(),
  last_message_at: storableTime.nullable().optional(),
  resolved_at: storableTime.nullable().optional(),
  last_message_content: z.string().optional(),
  summary: z.string().optional(),
  title: z.string().optional(),
  flags: z.array(flagSchema),
  tags: z.array(z.string()),
  intent: namedOrEmpty(intentSchema),
  topic: namedOrEmpty(topicSchema),
  resolution: z.enum(conversationResolutions).optional(),
  status: z.enum(conversationStatuses).optional(),
  type: z.enum(conversationTypes),
};

export const conversationDataSchema = z.object(conversationFields).meta({ id: 'ConversationData' });
export type ConversationData = z.infer<typeof conversationDataSchema>;

/** `conversation.upserted` on `conversations`: applied when its updated_at is not older than the stored one. */
export const conversationUpsertedSchema = z
  .object({
    type: z.literal('conversation.upserted'),
    shop_id: z.uuid(),
    conversation: conversationDataSchema,
  })
  .meta({ id: 'ConversationUpserted' });
export type ConversationUpserted = z.infer<typeof conversationUpsertedSchema>;

/** `message.created` on `conversations`: inserted once by message id, in any order relative to its conversation. */
export const messageCreatedSchema = z
  .object({
    type: z.literal('message.created'),
    shop_id: z.uuid(),
    conversation_id: z.uuid(),
    message: messageSchema,
  })
  .meta({ id: 'MessageCreated' });
export type MessageCreated = z.infer<typeof messageCreatedSchema>;

/** Value of a record on `conversations` (schema `conversation-record.v1`), keyed by shop_id. */
export const conversationRecordSchema = z.discriminatedUnion('type', [conversationUpsertedSchema, messageCreatedSchema]).meta({ id: 'ConversationRecord' });
export type ConversationRecord = z.infer<typeof conversationRecordSchema>;

/** A conversation's free text, sealed under its contact's data key since `conversation-record.v2`. */
export const sealedConversationFieldsSchema = conversationDataSchema.pick({ title: true, summary: true, last_message_content: true });
export type SealedConversationFields = z.infer<typeof sealedConversationFieldsSchema>;

/** A message's text, sealed under its conversation's contact's data key since `conversation-record.v2`. */
export const sealedMessageFieldsSchema = messageSchema.pick({ text: true });
export type SealedMessageFields = z.infer<typeof sealedMessageFieldsSchema>;

/**
 * `conversation.upserted` of a conversation with a contact, as `pnpm cli conversations import` and `seed` write it
 * since `conversation-record.v2`: v1's form, its free text (title, summary, last_message_content) only inside `sealed`.
 */
export const sealedConversationUpsertedSchema = conversationUpsertedSchema
  .extend({
    conversation: conversationDataSchema
      .omit({ title: true, summary: true, last_message_content: true })
      .extend({ contact_id: z.uuid() })
      .meta({ id: 'SealedConversationData' }),
    sealed: sealedPart(
      'the plaintext is the JSON of {title?, summary?, last_message_content?}, the additional data `conversation/<shop_id>/<conversation id>/<contact_id>`.',
    ),
  })
  .meta({ id: 'SealedConversationUpserted' });
export type SealedConversationUpserted = z.infer<typeof sealedConversationUpsertedSchema>;

/**
 * `message.created` of a conversation with a contact, as the CLI writes it since `conversation-record.v2`: v1's
 * form, the message's text only inside `sealed`, and the contact whose key sealed it.
 */
export const sealedMessageCreatedSchema = messageCreatedSchema
  .omit({ message: true })
  .extend({
    contact_id: z.uuid().describe("The conversation's contact, whose data key sealed the text."),
    message: messageSchema.omit({ text: true }),
    sealed: sealedPart('the plaintext is the JSON of {text}, the additional data `message/<shop_id>/<conversation_id>/<message id>/<contact_id>`.'),
  })
  .meta({ id: 'SealedMessageCreated' });
export type SealedMessageCreated = z.infer<typeof sealedMessageCreatedSchema>;

/**
 * Value of a record on `conversations` since schema `conversation-record.v2`: a record of a conversation with a
 * contact may be sealed (the CLI's import and seed seal them); upstream producers may still write the v1 forms,
 * in plaintext. The union reads both.
 */
export const storedConversationRecordSchema = z
  .union([sealedConversationUpsertedSchema, sealedMessageCreatedSchema, conversationUpsertedSchema, messageCreatedSchema])
  .meta({ id: 'ConversationRecordV2' });
export type StoredConversationRecord = z.infer<typeof storedConversationRecordSchema>;

/**
 * storedConversationRecordSchema as consumers decode with it: the form is chosen by `sealed` first, then by
 * `type`, so a record that fails says which field of that form failed.
 */
export const storedConversationRecordDecoder = z.unknown().transform((v, ctx): StoredConversationRecord => {
  const form =
    v !== null && typeof v === 'object' && 'sealed' in v
      ? z.discriminatedUnion('type', [sealedConversationUpsertedSchema, sealedMessageCreatedSchema])
      : conversationRecordSchema;
  const r = form.safeParse(v);
  if (r.success) return r.data;
  for (const issue of r.error.issues) ctx.issues.push({ code: 'custom', message: issue.message, path: issue.path, input: v });
  return z.NEVER;
});

const { resolution, status, type, ...leadingFields } = conversationFields;

/**
 * A conversation in an export page: the record's fields, the nullable ones always present (null when unset),
 * other optional ones omitted when absent, and its messages.
 */
export const conversationSchema = z
  .object({
    ...leadingFields,
    escalation_time: rfc3339.nullable(),
    start_time: rfc3339.nullable(),
    last_message_at: rfc3339.nullable(),
    resolved_at: rfc3339.nullable(),
    messages: z.array(messageSchema),
    resolution,
    status,
    type,
  })
  .meta({ id: 'Conversation' });
export type Conversation = z.infer<typeof conversationSchema>;

export const exportPageSchema = z
  .object({
    results: z.array(conversationSchema),
    next: z.url().nullable(),
    previous: z.url().nullable(),
  })
  .meta({ id: 'ConversationExportPage' });
export type ExportPage = z.infer<typeof exportPageSchema>;

export const MAX_EXPORT_LIMIT = 100;
export const MAX_IN_VALUES = 100;
export const MAX_EXPORT_WINDOW_DAYS = 30;

/** A comma-separated list of 1 to 100 values, each checked by `ok`; duplicates are dropped. */
const csvList = (ok: (v: string) => boolean, what: string) =>
  z.string().transform((s, ctx) => {
    const items = s.split(',').map((v) => v.trim());
    if (items.some((v) => v === '')) {
      ctx.addIssue({ code: 'custom', message: 'Give comma-separated values, none of them empty.' });
      return z.NEVER;
    }
    if (items.length > MAX_IN_VALUES) {
      ctx.addIssue({ code: 'custom', message: `Give at most ${MAX_IN_VALUES} values.` });
      return z.NEVER;
    }
    const bad = items.find((v) => !ok(v));
    if (bad !== undefined) {
      ctx.addIssue({ code: 'custom', message: `"${bad.slice(0, 64)}" is not ${what}.` });
      return z.NEVER;
    }
    return [...new Set(items.map((v) => v.toLowerCase()))];
  });

// Any 8-4-4-4-12 hex id, not only RFC 9562 ones (isUuid): a filter by an id never stored is an empty page,
// as it always was, not a 400. Both cases written out: the OpenAPI pattern has no flags.
const UUID_SHAPED = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const uuidShaped = (v: string) => UUID_SHAPED.test(v);
const uuidParam = z
  .string()
  .regex(UUID_SHAPED, 'Must be a uuid.')
  .transform((s) => s.toLowerCase());

const rangeParam = z
  .string()
  .regex(/^[^,]*,[^,]*$/, 'Give "<start>,<end>": each side an RFC 3339 UTC timestamp, relative:-<n><m|h|d|w>, or empty (the end only).')
  .describe(
    'Half-open window `start,end` (start <= t < end), at most 30 days. Each side: RFC 3339 UTC timestamp or `relative:-<n><m|h|d|w>`; an empty end means now.',
  );

/**
 * Query parameters of `GET /conversations/export/`. Unknown parameters are a 400; the range parameters
 * are only shaped here, their meaning (relative to now, window length) is checked where the clock is.
 */
export const exportQuerySchema = z
  .strictObject({
    agent_id: uuidParam.optional().describe('Only conversations assigned to this agent.'),
    contact_id: uuidParam.optional().describe('Only conversations for this contact.'),
    contact_id__in: csvList(uuidShaped, 'a uuid').optional().describe('Only conversations for these contacts; comma-separated, at most 100.'),
    id: uuidParam.optional().describe('Only this conversation.'),
    id__in: csvList(uuidShaped, 'a uuid').optional().describe('Only conversations with these ids; comma-separated, at most 100.'),
    resolution: z.enum(conversationResolutions).optional().describe('Only conversations with this resolution.'),
    resolution__in: csvList((v) => (conversationResolutions as readonly string[]).includes(v), `one of ${conversationResolutions.join(', ')}`)
      .optional()
      .describe('Only conversations with these resolutions; comma-separated.'),
    created_at__range: rangeParam.optional(),
    last_message_at__range: rangeParam.optional(),
    updated_at__range: rangeParam
      .optional()
      .describe(
        'Half-open window `start,end` (start <= t < end) on updated_at, at most 30 days; each side as in created_at__range. ' +
          'Given, results are ordered by (updated_at, id) instead of (created_at, id), and other filters still apply (AND). ' +
          "To keep a copy in sync, pull `updated_at__range=<last run's end>,<now>` windows: a conversation changed since shows up again in the next window.",
      ),
    limit: z
      .string()
      .regex(/^\d{1,6}$/, 'Must be an integer from 1 to 100.')
      .transform(Number)
      .pipe(z.number().int().min(1, 'Must be an integer from 1 to 100.').max(MAX_EXPORT_LIMIT, 'Must be an integer from 1 to 100.'))
      .optional()
      .describe('Conversations per page, 1 to 100; default 100.'),
    cursor: z.string().min(1).max(4096).optional().describe('Taken from a previous `next` or `previous` link.'),
  })
  .meta({ id: 'ConversationExportQuery' });
export type ExportQuery = z.infer<typeof exportQuerySchema>;
