// A consumer process for kafkaPlatformatic.int.spec.ts: joins GROUP with GROUP_INSTANCE_ID, prints each record's
// value on a line of its own, and runs until it is killed (the spec kills it with SIGKILL: it never leaves).
import { createLogger } from '@shopstream/telemetry';
import { createPlatformaticKafkaBus } from '@shopstream/bus';

const env = (name: string) =>
  process.env[name] ??
  (() => {
    throw new Error(`${name} is not set`);
  })();
const bus = await createPlatformaticKafkaBus({
  brokers: env('KAFKA_BROKERS').split(','),
  clientId: 'static-member-child',
  replicationFactor: 1,
  logger: createLogger('static-member-child', 'silent'),
  sessionTimeoutMs: Number(env('SESSION_TIMEOUT_MS')),
  groupInstanceId: env('GROUP_INSTANCE_ID'),
});
await bus.consume({
  groupId: env('GROUP'),
  topics: [env('TOPIC')],
  handleBatch: async (batch) => {
    for (const r of batch.records) process.stdout.write(`${r.value.toString()}\n`);
  },
});
process.stdout.write('joined\n');
