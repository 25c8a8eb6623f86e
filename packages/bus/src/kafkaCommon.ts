import type { Logger } from '@shopstream/telemetry';
import type { Bus } from './port.js';
import { createKafkaPublisher, type KafkaPublisherOptions } from './kafka/publisher.js';
import type { KafkaSecurity } from './kafka/security.js';
import { withTimeout } from './kafka/timeouts.js';
import { kafkaTopicMethods, type KafkaTopicAdmin } from './kafka/topics.js';

/**
 * What both Kafka adapters (kafkajs in kafka.ts and kafkajs/, @platformatic/kafka in kafkaPlatformatic.ts and
 * platformatic/) share: their options, and kafkaBus, which makes a Bus of an adapter's parts with the shared
 * pieces in kafka/ (security.ts, topics.ts, publisher.ts with brokerGate.ts, timeouts.ts).
 */

/** What both adapters' factories take (createKafkaBus, createPlatformaticKafkaBus); each adds its own. */
export interface KafkaBusBaseOptions {
  brokers: string[];
  /** TLS and SASL; unset: plaintext. */
  security?: KafkaSecurity;
  clientId: string;
  replicationFactor: number;
  logger: Logger;
  /** How long publish may wait for the broker before it gives up with BusUnavailableError. */
  publishTimeoutMs?: number;
  /** How long concurrent publishes are gathered into one send. */
  lingerMs?: number;
  /**
   * A consumer group member that sends no heartbeat for this long is dropped. After a kill -9, a restarted
   * member joins only once the dead one's session ran out, so this bounds how long a projector stays away.
   * Default 8 s (heartbeats every second, heartbeatIntervalMs); the broker refuses less than its
   * group.min.session.timeout.ms (6 s).
   */
  sessionTimeoutMs?: number;
  /**
   * A consumer's fetch is answered once the broker has this many bytes for it or waited fetchMaxWaitMs (Kafka's
   * fetch.min.bytes and fetch.max.wait.ms). More than 1 byte gathers a moderate rate's records into fewer, larger
   * batches (fewer fetches, transactions and commits per record) for at most fetchMaxWaitMs more latency on a
   * quiet topic. Defaults 64 KiB and 100 ms. Reads (`read`, rebuilds) take what there is at once.
   */
  fetchMinBytes?: number;
  fetchMaxWaitMs?: number;
  /**
   * A send in flight longer than this (plus 250 ms per MiB it carries) marks the broker stalled: new publishes
   * fail at once until a send succeeds, and each publish waits at most this plus 800 ms. Default 1 s.
   */
  stallMs?: number;
}

/** The consumers' fetch defaults (KafkaBusBaseOptions.fetchMinBytes, fetchMaxWaitMs). */
export const FETCH_MIN_BYTES = 64 * 1024;
export const FETCH_MAX_WAIT_MS = 100;
/** PlatformaticKafkaBusOptions.commitIntervalMs's default. */
export const COMMIT_INTERVAL_MS = 1_000;

/**
 * The consumers' heartbeat interval for a session timeout: at most a second. A member learns that the group is
 * rebalancing only from its next heartbeat's answer, so after a member's kill -9 its partitions move once the
 * session ran out plus up to one interval: 8 s + 1 s, where a third of the session (2.5 s) made it up to 10.5 s.
 * A heartbeat is a tiny request; one a second per member is nothing to the broker.
 */
export const heartbeatIntervalMs = (sessionTimeoutMs: number): number => Math.max(100, Math.min(1_000, Math.floor(sessionTimeoutMs / 3.2)));

/** The admin calls of a Kafka adapter's Bus that kafkaBus makes, in the client's own words. */
export interface KafkaAdmin extends KafkaTopicAdmin {
  /** Deletes a consumer group; true when it is gone (or never existed), false while it still has members. */
  deleteGroup(groupId: string): Promise<boolean>;
  /** Resolves once the bus serves: Kafka answered a request any live cluster answers at once. Bus.ping. */
  serving(): Promise<unknown>;
}

/** What kafkaBus makes a Bus of, from an adapter. */
interface KafkaBusParts {
  /** The bootstrap brokers, as the bus describes where it is. */
  brokers: string[];
  admin: KafkaAdmin;
  replicationFactor: number;
  /** How long a publish may wait for the broker (createKafkaPublisher), and ping for its answer. */
  publishTimeoutMs: number;
  /** The adapter's producer, for createKafkaPublisher. */
  producer: Omit<KafkaPublisherOptions, 'publishTimeoutMs'>;
}

/** What each adapter's Bus has in its own client's words. */
type KafkaBusOwn = Omit<
  Bus,
  'description' | 'messagingSystem' | 'selfManaged' | 'ensureTopics' | 'alignTopicConfigs' | 'topicConfigs' | 'publish' | 'deleteGroup' | 'ping'
>;

/**
 * A Kafka adapter's Bus: what both adapters are alike (the topic methods over the adapter's admin, deleteGroup
 * and ping, the publish path of createKafkaPublisher over the adapter's producer, closed before the rest), and its
 * own methods.
 */
export function kafkaBus(o: KafkaBusParts, own: KafkaBusOwn): Bus {
  const publisher = createKafkaPublisher({ ...o.producer, publishTimeoutMs: o.publishTimeoutMs });
  return {
    description: `Kafka at ${o.brokers.join(',')}`,
    messagingSystem: 'kafka',
    selfManaged: false,
    ...kafkaTopicMethods(o.admin, o.replicationFactor),
    publish: publisher.publish,
    async deleteGroup(groupId) {
      if (!(await o.admin.deleteGroup(groupId))) throw new Error(`consumer group ${groupId} still has members: stop them first`);
    },
    async ping() {
      try {
        await withTimeout(o.admin.serving(), 'Kafka ping', o.publishTimeoutMs);
        return true;
      } catch {
        return false;
      }
    },
    ...own,
    async close() {
      await publisher.close();
      await own.close();
    },
  };
}
