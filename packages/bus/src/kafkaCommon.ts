import { topicLimits } from '@shopstream/contracts';
import { counter, histogram } from '@shopstream/telemetry';
import { BusUnavailableError, type TopicSpec } from './port.js';

/** What both Kafka adapters (kafkajs in kafka.ts, @platformatic/kafka in kafkaPlatformatic.ts) share. */

/** How long publishes fail at once after a send failed because the broker is away (see createBrokerGate). */
export const FAIL_FAST_MS = 1_000;

export const resentRecords = counter(
  'shopstream_kafka_records_resent_total',
  'Records sent again because Kafka answered a send without their partition (a leader moved during it; kafkajs#1303).',
);
export const sendSeconds = histogram('shopstream_kafka_send_seconds', 'Time of one Kafka produce request (a micro-batch), by outcome.', ['outcome']);

/** The settings a topic is created with: Shopstream's limits, then the spec's own. */
export function topicCreateConfig(spec: TopicSpec, replicationFactor: number): Record<string, string> {
  return {
    'max.message.bytes': String(topicLimits.maxMessageBytes),
    // acks=-1 means "every in-sync replica": with the broker's default of 1, a leader whose followers
    // fell behind acknowledges alone, and losing it loses answered events. 2 of 3 in production.
    'min.insync.replicas': String(Math.min(2, replicationFactor)),
    ...spec.config,
  };
}

/**
 * While the broker is away (a send failed to reach it), publishes fail at once (BusUnavailableError: 503 with
 * Retry-After) instead of each waiting out the publish timeout, and do not pile up behind a send that hangs:
 * one publish at a time, at most every FAIL_FAST_MS, is let through as a probe (its batch tries Kafka); the
 * first send that succeeds ends it. Like the database's circuit breaker (connectPostgres): a broker outage
 * is answered in milliseconds, and ingest takes events again within a second of the broker's return.
 */
export function createBrokerGate() {
  let away = false;
  let probing = false;
  let failedAt = 0;
  return {
    /** Whether this publish may go to Kafka (true: it is the probe); throws while the broker is away. */
    admit(): boolean {
      if (!away) return false;
      if (probing) throw new BusUnavailableError('Kafka is unavailable: a send is trying it again');
      if (Date.now() - failedAt < FAIL_FAST_MS) throw new BusUnavailableError('Kafka is unavailable: a send failed less than a second ago');
      probing = true;
      return true;
    },
    /** Before a flush: a batch admitted before the broker went away, flushed after, fails at once too. */
    check(probe: boolean): void {
      if (away && !probe) throw new BusUnavailableError('Kafka is unavailable: a send failed less than a second ago');
    },
    sent(): void {
      away = false;
    },
    failed(brokerAway: boolean): void {
      away = brokerAway;
      if (away) failedAt = Date.now();
    },
    flushed(probe: boolean): void {
      if (probe) probing = false;
    },
  };
}
