import { topicLimits } from '@shopstream/contracts';
import type { OutgoingRecord } from './port.js';

/** A record's weight in a send: value, key, headers and the per-record overhead of Kafka's format, rounded up. */
export function recordBytes(r: OutgoingRecord): number {
  let n = 64 + Buffer.byteLength(r.key) + (typeof r.value === 'string' ? Buffer.byteLength(r.value) : r.value.length);
  for (const [k, v] of Object.entries(r.headers ?? {})) n += k.length + v.length + 8;
  return n;
}

/** One send's records and their weight (recordBytes). */
export interface Send {
  records: OutgoingRecord[];
  bytes: number;
}

/**
 * The sends one publish takes (the only place a publish is split, by the adapter; callers publish what they
 * have). A publish that fits the topics' max.message.bytes is one send, so its records are written all or none
 * (ingest answers 503 "no item recorded" on that promise); a larger one (an outbox relay, a CLI import) goes in
 * sends of at most the send budget, in order, so one shop's records stay in order.
 */
export function splitForSend(records: OutgoingRecord[], limits: { maxMessageBytes: number; sendBudgetBytes: number } = topicLimits): Send[] {
  const sizes = records.map(recordBytes);
  const total = sizes.reduce((a, b) => a + b, 0);
  if (total <= limits.maxMessageBytes) return [{ records, bytes: total }];
  const sends: Send[] = [];
  let send: Send = { records: [], bytes: 0 };
  records.forEach((r, i) => {
    if (send.records.length > 0 && send.bytes + sizes[i] > limits.sendBudgetBytes) {
      sends.push(send);
      send = { records: [], bytes: 0 };
    }
    send.records.push(r);
    send.bytes += sizes[i];
  });
  if (send.records.length > 0) sends.push(send);
  return sends;
}
