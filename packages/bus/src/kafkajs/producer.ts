import { CompressionTypes, Partitioners, type Kafka, type Message, type Producer, type TopicMessages } from 'kafkajs';
import type { Logger } from '@shopstream/telemetry';
import { partitionFor } from '../pglog/partitionFor.js';
import { keyPartitionMemo, sendUntilAnswered, type RecordsByTopic } from '../kafka/publisher.js';

/** The kafkajs adapter's producer, as createKafkaPublisher (kafka/publisher.ts) sends with it. */

/**
 * Whether a failed send says the broker is away (unreachable, closed the connection, did not answer in
 * time), as opposed to refusing these records (an unknown topic, a record too large): only the first makes
 * publishes fail fast for a moment. kafkajs wraps the last attempt's error (originalError, cause).
 */
function brokerAway(e: unknown): boolean {
  for (let err = e as { name?: string; message?: string; originalError?: unknown; cause?: unknown } | undefined, depth = 0; err && depth < 5; depth++) {
    if (/^KafkaJS(Connection|ConnectionClosed|RequestTimeout|BrokerNotFound)Error$/.test(err.name ?? '')) return true;
    if (/ECONNREFUSED|ECONNRESET|EHOSTUNREACH|ETIMEDOUT|timed out/.test(err.message ?? '')) return true;
    err = (err.originalError ?? err.cause) as typeof err;
  }
  return false;
}

/** Whether a failed send says a partition's records were larger than the topic takes (kafkajs' protocol error type). */
function tooLarge(e: unknown): boolean {
  for (let err = e as { type?: string; originalError?: unknown; cause?: unknown } | undefined, depth = 0; err && depth < 5; depth++) {
    if (err.type === 'MESSAGE_TOO_LARGE' || err.type === 'RECORD_LIST_TOO_LARGE') return true;
    err = (err.originalError ?? err.cause) as typeof err;
  }
  return false;
}

/** The producer of a kafkajs bus: connected on first send, replaced after a failed one. */
export function kafkajsProducer(kafka: Kafka, log: Logger) {
  // The partition count each topic had at its last send, as kafkajs gave it to the partitioner (see `sendAll`).
  const partitionCounts = new Map<string, number>();
  // partitionFor of each key, per topic and partition count: records carry few distinct keys (the shop id).
  const memo = keyPartitionMemo();
  const partitionOf = (topic: string, key: string, count: number) => memo(topic, key, count, () => partitionFor(key, count));
  const defaultPartitioner = Partitioners.DefaultPartitioner();
  const newProducer = (): Producer =>
    kafka.producer({
      // Murmur2 of the key (partitionFor: kafkajs' default partitioner, and the Java client's), remembering each
      // key's partition; and the partition count kafkajs passes, for sendAll's check.
      createPartitioner: () => (args) => {
        const { topic, partitionMetadata, message } = args;
        partitionCounts.set(topic, partitionMetadata.length);
        if ((message.partition !== null && message.partition !== undefined) || typeof message.key !== 'string') return defaultPartitioner(args);
        return partitionOf(topic, message.key, partitionMetadata.length);
      },
      idempotent: true,
      maxInFlightRequests: 1,
      allowAutoTopicCreation: false,
      retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1_000 },
    });
  let producer: Producer = newProducer();
  let producerConnected: Promise<void> | null = null;
  const connectProducer = () =>
    (producerConnected ??= producer.connect().catch((e) => {
      producerConnected = null;
      throw e;
    }));
  // After a failed or timed-out send the producer is replaced, never reused. kafkajs rolls a partition's
  // sequence number back when a produce request fails, a client-side timeout included, although the broker
  // may have appended that batch; the next batch would reuse the sequence, and if it had as many records for
  // that partition the broker would take it for a duplicate: acknowledged, not written, its events lost.
  // A new producer gets a new producer id, so nothing it sends can be deduplicated against the old one's
  // batches (whose records were answered 503, and may still land: a retry then duplicates, never loses).
  const replaceProducer = () => {
    const old = producer;
    producer = newProducer();
    producerConnected = null;
    void old.disconnect().catch(() => {});
  };

  /**
   * sendBatch, and again for whatever it answered without sending. kafkajs 2.2.4 keeps, across the retries
   * of one sendBatch, the answers of the brokers that already answered and retries only the others: when a
   * dead leader's partition moves to a broker that answered for its own partitions in the same send, that
   * partition's records are never sent again, and sendBatch resolves as if they were (tulios/kafkajs#1303;
   * found by `pnpm faults leader-failover`: 69 events answered 202 and never in the log). So every partition
   * a message went to must be in the answer; the messages of a partition that is not are sent again, to the
   * same partition, by the same producer (kafkajs rolled that partition's sequence back when its request
   * failed, so a batch the dead leader did append and replicate is taken by the broker as a duplicate).
   * A message's partition is murmur2 of its key over the partition count kafkajs gave the partitioner
   * (partitionFor), so the check needs nothing of kafkajs but its public partitioner interface and its answer.
   */
  const sendAll = (byTopic: RecordsByTopic): Promise<void> =>
    sendUntilAnswered(
      log,
      [...byTopic].map(([topic, records]): TopicMessages => ({
        topic,
        messages: records.map((r): Message => ({ key: r.key, value: r.value, headers: r.headers })),
      })),
      async (pending) => {
        const answers = await producer.sendBatch({ acks: -1, compression: CompressionTypes.None, topicMessages: pending });
        const answered = new Set(answers.map((a) => `${a.topicName}\u0000${a.partition}`));
        const again: TopicMessages[] = [];
        let records = 0;
        for (const { topic, messages } of pending) {
          const count = partitionCounts.get(topic);
          const sentTo = (m: Message) => m.partition ?? (count === undefined ? undefined : partitionOf(topic, m.key as string, count));
          const missing = messages.filter((m) => !answered.has(`${topic}\u0000${sentTo(m)}`));
          if (missing.length === 0) continue;
          records += missing.length;
          again.push({ topic, messages: missing.map((m) => ({ ...m, partition: sentTo(m) })) });
        }
        return { again, records };
      },
    );

  return {
    connect: connectProducer,
    sendAll,
    brokerAway,
    tooLarge,
    replaceProducer,
    /** The current producer's. */
    disconnect: () => producer.disconnect(),
  };
}
