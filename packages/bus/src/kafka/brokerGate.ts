import { counter } from '@shopstream/telemetry';
import { BusUnavailableError } from '../port.js';

/** After a send failed because the broker is away, how long until the next probe may try it (see createBrokerGate). */
export const FAIL_FAST_MS = 1_000;

export const refusals = counter(
  'shopstream_kafka_publish_refusals_total',
  'Publishes answered BusUnavailableError without waiting for a send, by reason: stalled (a send has been in flight longer than the stall bound), away (a send failed: only a probe goes), queued (gave up behind a send in flight, not sent), in_flight (gave up on its own send, which may still land).',
  ['reason'],
);

/**
 * While the broker is away (a send failed to reach it) or stalled (a send has been in flight longer than
 * stallMs), publishes fail at once (PublishRefusedError: 503 with Retry-After) instead of each waiting for a
 * send that hangs. While away, one publish at a time, at most every FAIL_FAST_MS, is let through as a probe
 * (its batch tries Kafka); only a send that succeeds ends it, however long that takes. Like the database's
 * circuit breaker (connectPostgres): a broker outage or stall is answered in milliseconds, and ingest takes
 * events again within about a second of the broker's return.
 */
export function createBrokerGate() {
  let away = false;
  let stalled = false;
  let probing = false;
  let failedAt = 0;
  const refuse = (reason: 'stalled' | 'away', message: string): never => {
    refusals.inc({ reason });
    throw new PublishRefusedError(message);
  };
  return {
    /** Whether this publish may go to Kafka (true: it is the probe); throws while the broker is stalled or away. */
    admit(): boolean {
      if (stalled) refuse('stalled', 'Kafka is not answering: a send has been waiting for it too long');
      if (!away) return false;
      if (probing) refuse('away', 'Kafka is unavailable: a send is trying it again');
      if (Date.now() - failedAt < FAIL_FAST_MS) refuse('away', 'Kafka is unavailable: a send failed less than a second ago');
      probing = true;
      return true;
    },
    /** Before a flush: a batch admitted before the broker went away, flushed after, fails at once too. */
    check(probe: boolean): void {
      if (away && !probe) refuse('away', 'Kafka is unavailable: a send failed less than a second ago');
    },
    stall(): void {
      stalled = true;
    },
    sent(): void {
      away = false;
      stalled = false;
    },
    failed(brokerAway: boolean): void {
      away = brokerAway;
      stalled = false;
      if (away) failedAt = Date.now();
    },
    flushed(probe: boolean): void {
      if (probe) probing = false;
    },
  };
}

/**
 * A publish refused before any of its records was sent (the broker is stalled or away, see createBrokerGate):
 * none of them can land, so sending them again later makes no copy. A BusUnavailableError like any other for
 * callers that do not care (ingest answers 503 either way); the outbox relay does care (outbox.ts).
 */
export class PublishRefusedError extends BusUnavailableError {
  constructor(message: string) {
    super(message);
    this.name = 'PublishRefusedError';
  }
}
