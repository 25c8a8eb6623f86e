import { ProduceAcks, Producer, type MessageToProduce } from '@platformatic/kafka';
import type { Logger } from '@shopstream/telemetry';
import { partitionFor } from '../pglog/partitionFor.js';
import { keyPartitionMemo, sendUntilAnswered, type RecordsByTopic } from '../kafka/publisher.js';
import { forceClose, hasApiError, type ClientBase } from './client.js';

/** The @platformatic/kafka adapter's producer, as createKafkaPublisher (kafka/publisher.ts) sends with it. */

type Out = Producer<string, string | Buffer, string, string>;

/**
 * Whether a failed send says the broker is away (unreachable, closed the connection, did not answer in
 * time), as opposed to refusing these records (an unknown topic, a record too large): only the first makes
 * publishes fail fast for a moment. @platformatic/kafka gathers the errors of its retries (MultipleErrors).
 */
function brokerAway(e: unknown): boolean {
  const seen = new Set<unknown>();
  const walk = (err: unknown, depth: number): boolean => {
    if (!err || typeof err !== 'object' || depth > 6 || seen.has(err)) return false;
    seen.add(err);
    const x = err as { code?: string; message?: string; errors?: unknown[]; cause?: unknown };
    if (x.code === 'PLT_KFK_NETWORK' || x.code === 'PLT_KFK_TIMEOUT') return true;
    if (/ECONNREFUSED|ECONNRESET|EHOSTUNREACH|ETIMEDOUT|timed out/.test(x.message ?? '')) return true;
    return (x.errors ?? []).some((inner) => walk(inner, depth + 1)) || walk(x.cause, depth + 1);
  };
  return walk(e, 0);
}

/** Whether a failed send says a partition's records were larger than the topic takes. */
const tooLarge = (e: unknown) => hasApiError(e, 'MESSAGE_TOO_LARGE') || hasApiError(e, 'RECORD_LIST_TOO_LARGE');
const toBuffer = (v: string | Buffer | undefined) => (typeof v === 'string' ? Buffer.from(v, 'utf8') : (v ?? Buffer.alloc(0)));

/** The producer of a @platformatic/kafka bus: replaced after a failed send. */
export function platformaticProducer(base: ClientBase, opts: { clientId: string }, log: Logger) {
  const newProducer = (): Out =>
    new Producer({
      ...base,
      clientId: opts.clientId,
      idempotent: true,
      acks: ProduceAcks.ALL,
      // Bounded (the client raises 0 or 1 to "forever" for an idempotent producer): a send that cannot complete
      // fails within publishTimeoutMs, and the producer is replaced (see replaceProducer).
      retries: 3,
      autocreateTopics: false,
      serializers: {
        key: (k?: string) => (k === undefined ? undefined : Buffer.from(k, 'utf8')),
        value: (v?: string | Buffer) => (v === undefined ? undefined : toBuffer(v)),
        headerKey: (k?: string) => (k === undefined ? undefined : Buffer.from(k, 'utf8')),
        headerValue: (v?: string) => (v === undefined ? undefined : Buffer.from(v, 'utf8')),
      },
    });
  let producer = newProducer();
  // After a failed or timed-out send the producer is replaced, never reused, for the reason kafkajs/producer.ts gives:
  // the client advances a partition's sequence number only for partitions that answered, so a batch the broker
  // appended without answering would make the next one with as many records look like its duplicate.
  const replaceProducer = () => {
    const old = producer;
    producer = newProducer();
    void forceClose(old).catch(() => {});
  };

  /** Partition counts of the topics a send goes to (the producer's metadata, cached by the client). */
  const partitionCounts = async (p: Out, topics: string[]): Promise<Map<string, number>> => {
    const md = await p.metadata({ topics });
    return new Map(topics.map((t) => [t, md.topics.get(t)!.partitionsCount]));
  };
  // partitionFor of each key, per topic and partition count: records carry few distinct keys (the shop id).
  const memo = keyPartitionMemo();
  const partitionOf = (topic: string, key: string, count: number): number => memo(topic, key, count, () => partitionFor(key, count));

  /**
   * One send, and again for whatever partition its answer lacks. Every message carries its partition
   * (partitionFor: the one kafkajs' default partitioner picks), so the check of kafkajs/producer.ts's sendAll needs no
   * partitioner hook; it has not been seen to fire with this client, whose produce retries follow a moved leader.
   */
  const sendAll = async (byTopic: RecordsByTopic): Promise<void> => {
    const p = producer;
    const counts = await partitionCounts(p, [...byTopic.keys()]);
    const messages: MessageToProduce<string, string | Buffer, string, string>[] = [];
    for (const [topic, records] of byTopic) {
      const count = counts.get(topic)!;
      for (const r of records) messages.push({ topic, key: r.key, value: r.value, headers: r.headers, partition: partitionOf(topic, r.key, count) });
    }
    await sendUntilAnswered(log, messages, async (pending) => {
      const { offsets = [] } = await p.send({ messages: pending });
      const answered = new Set(offsets.map((o) => `${o.topic}\u0000${o.partition}`));
      const again = pending.filter((m) => !answered.has(`${m.topic}\u0000${m.partition}`));
      return { again, records: again.length };
    });
  };

  return {
    sendAll,
    brokerAway,
    tooLarge,
    replaceProducer,
    /** The current producer's, and whatever it still has open. */
    close: () => forceClose(producer),
  };
}
