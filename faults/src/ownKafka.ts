import { startLocalKafka, type KafkaHandle } from '@shopstream/testkit';
import type { Context } from './types.js';

/** A scenario's own single-node Kafka, stopped when the scenario ends. */
export async function ownKafka(ctx: Context): Promise<KafkaHandle> {
  const kafka = await startLocalKafka({});
  ctx.defer(() => kafka.stop());
  ctx.log(`Kafka ${kafka.version} on ${kafka.brokers.join(',')}`);
  return kafka;
}
