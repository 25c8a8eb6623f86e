import { loadEnv } from '@shopstream/config';
import type { KafkaClientName } from './loadProcess.js';

/** The Kafka adapters the ingest scenarios measure unless told otherwise (`--kafka-clients`, BENCH_KAFKA_CLIENTS). */
export const DEFAULT_KAFKA_CLIENTS: KafkaClientName[] = ['kafkajs', 'platformatic'];

export interface KafkaClientChoice {
  /** Each adapter to run: its name and the environment that selects it in a Shopstream process. */
  run: { client: KafkaClientName; env: Record<string, string> }[];
  /** Asked for but not run, and why. */
  skipped: { client: string; reason: string }[];
}

/**
 * Which of the requested adapters this checkout can run: those its configuration accepts as KAFKA_CLIENT.
 * A checkout whose configuration has no KAFKA_CLIENT runs kafkajs (its only adapter) and skips the others.
 */
export function chooseKafkaClients(requested: string[]): KafkaClientChoice {
  const run: KafkaClientChoice['run'] = [];
  const skipped: KafkaClientChoice['skipped'] = [];
  const base = { KAFKA_BROKERS: '127.0.0.1:9092', DATABASE_URL: 'postgres://x@127.0.0.1/x' };
  const known = 'KAFKA_CLIENT' in loadEnv({ ...base, KAFKA_CLIENT: 'kafkajs' });
  for (const c of requested) {
    if (c !== 'kafkajs' && c !== 'platformatic') {
      skipped.push({ client: c, reason: 'not an adapter the bench knows (kafkajs, platformatic)' });
      continue;
    }
    if (!known) {
      if (c === 'kafkajs') run.push({ client: c, env: {} });
      else skipped.push({ client: c, reason: 'this checkout has no KAFKA_CLIENT setting (only kafkajs)' });
      continue;
    }
    try {
      loadEnv({ ...base, KAFKA_CLIENT: c });
      run.push({ client: c, env: { KAFKA_CLIENT: c } });
    } catch (e) {
      skipped.push({ client: c, reason: `KAFKA_CLIENT=${c} refused by this checkout's configuration` });
    }
  }
  return { run, skipped };
}
