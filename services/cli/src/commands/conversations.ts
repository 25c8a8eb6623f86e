import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { conversationsTopic, topicLimits, unstorableText, type StoredConversationRecord } from '@shopstream/contracts';
import { recordBytes, type OutgoingRecord } from '@shopstream/bus';
import { ContactKeys, ConversationSealer, openKeyring } from '@shopstream/privacy';
import type { Runtime } from '@shopstream/runtime';
import { parse, UsageError, type Command } from '../args.js';
import { withRuntime } from '../context.js';
import { cliIo } from '../io.js';
import { progress, PROGRESS_HELP, PROGRESS_OPTION } from '../progress.js';

/** The record as it goes on the topic: keyed by shop, headers a consumer can route on without parsing. */
export function conversationMessage(record: StoredConversationRecord, value?: string): OutgoingRecord {
  return conversationsTopic.record(record, value);
}

/** How many records are sealed at a time: one data key look-up per shop for each such chunk. */
const SEAL_CHUNK = 500;

/**
 * A batchPublisher whose records are sealed first (docs/privacy.md): a conversation with a contact, and its
 * messages, are written as conversation-record.v2 with their text under the contact's data key. `encoded`: the
 * record's JSON as read, kept for a record written as it is.
 */
export async function sealingPublisher(rt: Runtime) {
  const keys = new ContactKeys(rt.db, await openKeyring(rt));
  const sealer = new ConversationSealer(rt.db, keys);
  const publisher = batchPublisher(rt);
  let pending: { record: StoredConversationRecord; encoded?: string }[] = [];
  const flush = async () => {
    const chunk = pending;
    pending = [];
    const sealed = await sealer.seal(chunk.map((p) => p.record));
    for (let i = 0; i < chunk.length; i++) {
      await publisher.add(conversationMessage(sealed[i], sealed[i] === chunk[i].record ? chunk[i].encoded : undefined));
    }
  };
  return {
    async add(record: StoredConversationRecord, encoded?: string) {
      pending.push({ record, encoded });
      if (pending.length >= SEAL_CHUNK) await flush();
    },
    async close(): Promise<{ unsealedMessages: number }> {
      await flush();
      await publisher.close();
      await keys.close();
      return { unsealedMessages: sealer.unsealedMessages };
    },
  };
}

/**
 * Publishes in batches of the bus's send budget (the adapter splits sends by size; a batch is where the
 * import waits), with one batch in flight while the next one fills, so reading the file and the log's round
 * trips overlap without holding the whole file in memory.
 */
export function batchPublisher(rt: Runtime, maxBytes: number = topicLimits.sendBudgetBytes) {
  let batch: OutgoingRecord[] = [];
  let bytes = 0;
  let inFlight: Promise<void> = Promise.resolve();
  const flush = async () => {
    if (batch.length === 0) return;
    const records = batch;
    batch = [];
    bytes = 0;
    await inFlight;
    inFlight = rt.bus.publish(rt.topics.conversations, records);
    // Surface a failure of this send at the latest on the next flush or on close.
    inFlight.catch(() => {});
  };
  return {
    async add(r: OutgoingRecord) {
      const size = recordBytes(r);
      if (bytes + size > maxBytes) await flush();
      batch.push(r);
      bytes += size;
    },
    async close() {
      await flush();
      await inFlight;
    },
  };
}

/** Where an import stands: lines and bytes read so far, records published, bad lines. */
export interface ImportProgress {
  lines: number;
  bytes: number;
  published: number;
  bad: number;
}

export async function importConversations(
  rt: Runtime,
  input: Readable,
  report: (line: number, reason: string) => void,
  onProgress: (p: ImportProgress) => void = () => {},
): Promise<{ published: number; bad: number; unsealedMessages: number }> {
  const publisher = await sealingPublisher(rt);
  let lineNo = 0;
  let bytes = 0;
  let published = 0;
  let bad = 0;
  for await (const line of createInterface({ input, crlfDelay: Infinity })) {
    lineNo++;
    bytes += Buffer.byteLength(line) + 1;
    onProgress({ lines: lineNo, bytes, published, bad });
    if (line.trim() === '') continue;
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch (e) {
      bad++;
      report(lineNo, `not JSON: ${(e as Error).message}`);
      continue;
    }
    // What the projector would dead-letter: reported here, by line, instead of published.
    const unstorable = unstorableText(json);
    if (unstorable) {
      bad++;
      report(lineNo, `${unstorable.path || '(record)'}: ${unstorable.message}`);
      continue;
    }
    const parsed = conversationsTopic.schema.safeParse(json);
    if (!parsed.success) {
      bad++;
      const issues = parsed.error.issues.slice(0, 3).map((i) => `${i.path.join('.') || '(record)'}: ${i.message}`);
      report(lineNo, issues.join('; '));
      continue;
    }
    await publisher.add(parsed.data, line.trim());
    published++;
  }
  const { unsealedMessages } = await publisher.close();
  return { published, bad, unsealedMessages };
}

/** `12.0 MiB of 40.0 MiB (30%), 52,113 lines, 52,100 published, 13 bad`: the size only when the file has one. */
function importLine(p: ImportProgress, size: number | null): string {
  const mib = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`;
  const read = size ? `${mib(Math.min(p.bytes, size))} of ${mib(size)} (${Math.floor((Math.min(p.bytes, size) / size) * 100)}%)` : mib(p.bytes);
  return `import: ${read}, ${p.lines.toLocaleString('en-US')} lines, ${p.published.toLocaleString('en-US')} published, ${p.bad.toLocaleString('en-US')} bad`;
}

export const command: Command = {
  subcommands: {
    import: {
      usage: `  pnpm cli conversations import <file.jsonl|-> [--progress]
      Reads one \`conversations\` record per line (conversation.upserted or message.created, see the README),
      validates each, and publishes the valid ones to the conversations topic, keyed by shop_id. "-" reads stdin.
      A conversation with a contact, and its messages, are sealed under the contact's data key (docs/privacy.md).
      Bad lines are reported by number on stderr and skipped; the exit code is 1 when there was any.
      Blank lines are ignored. Progress goes to stderr on a terminal. ${PROGRESS_HELP}`,
      async run(args) {
        const { values, positionals } = parse(args, PROGRESS_OPTION, true);
        if (positionals.length !== 1) throw new UsageError('Give one file to import (or - for stdin).');
        const file = positionals[0];
        const input = file === '-' ? (cliIo().stdin ?? process.stdin) : createReadStream(file);
        // Fail on an unreadable file before connecting to anything.
        if (file !== '-')
          await new Promise<void>((resolve, reject) => (input as ReturnType<typeof createReadStream>).once('open', () => resolve()).once('error', reject));
        const size = file === '-' ? null : (await stat(file)).size;
        const bar = progress({ lines: values.progress === true });
        let last: ImportProgress = { lines: 0, bytes: 0, published: 0, bad: 0 };
        const { published, bad, unsealedMessages } = await withRuntime((rt) =>
          importConversations(
            rt,
            input,
            (line, reason) => console.error(`line ${line}: ${reason}`),
            (p) => {
              last = p;
              bar.update(() => importLine(p, size));
            },
          ),
        );
        bar.done(importLine({ ...last, published, bad }, size));
        if (unsealedMessages > 0) {
          console.error(
            `${unsealedMessages} message(s) written in plaintext: their conversation was neither earlier in the file nor projected, so its contact was unknown (docs/privacy.md).`,
          );
        }
        console.log(`Published ${published} record(s) to the conversations topic; ${bad} bad line(s) skipped.`);
        return bad > 0 ? 1 : 0;
      },
    },
  },
};
