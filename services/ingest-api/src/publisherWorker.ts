/**
 * The producer thread of ingest's large bodies (publisher.ts): a Kafka producer of its own, the same adapter and
 * settings as the process's (idempotent, one send in flight, the keys' partitioner), so encoding a 6 MB send
 * (kafkajs: copies and a CRC32C of the whole batch) is done here, off the event loop that answers HTTP. Each
 * message is a PublishTask; the answer says whether the broker acknowledged the records.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { BusUnavailableError, createKafkaBus, createPlatformaticKafkaBus, type Bus } from '@shopstream/bus';
import { createLogger } from '@shopstream/telemetry';
import { niceThisThread } from '@shopstream/runtime/thread-priority';
import type { PublisherConfig, PublishAnswer, PublisherMessage } from './publisher.js';

const config = workerData as PublisherConfig;
niceThisThread(config.nice);
// Standard error: the process's standard output is its own log's (and the CLI's result's).
const logger = createLogger('ingest-api', config.logLevel, 2).child({ thread: 'large-body-producer' });
const options = {
  brokers: config.brokers,
  ...(config.security ? { security: config.security } : {}),
  clientId: config.clientId,
  replicationFactor: config.replicationFactor,
  logger,
  lingerMs: config.lingerMs,
  publishTimeoutMs: config.publishTimeoutMs,
  stallMs: config.stallMs,
};
const opened: Promise<Bus> = config.client === 'platformatic' ? createPlatformaticKafkaBus(options) : createKafkaBus(options);

parentPort!.on('message', (m: PublisherMessage) => {
  if (m.type === 'close') {
    void opened
      .then((bus) => bus.close())
      .catch((err: unknown) => logger.error({ err }, 'closing the large-body producer failed'))
      .finally(() => parentPort!.close());
    return;
  }
  const records = m.records.map((r) => ({
    key: r.key,
    value: typeof r.value === 'string' ? r.value : Buffer.from(r.value.buffer, r.value.byteOffset, r.value.byteLength),
    ...(r.headers ? { headers: r.headers } : {}),
  }));
  void opened
    .then((bus) => bus.publish(m.topic, records))
    .then(
      (): PublishAnswer => ({ id: m.id, ok: true }),
      (e: unknown): PublishAnswer => ({
        id: m.id,
        ok: false,
        unavailable: e instanceof BusUnavailableError,
        message: e instanceof Error ? e.message : String(e),
      }),
    )
    .then((a) => parentPort!.postMessage(a));
});
