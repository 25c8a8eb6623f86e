import { readFileSync } from 'node:fs';
import { startLocalKafka, type KafkaHandle } from '@shopstream/testkit';
import type { Context } from './types.js';

/** A scenario's own single-node Kafka, stopped when the scenario ends. */
export async function ownKafka(ctx: Context): Promise<KafkaHandle> {
  const kafka = await startLocalKafka({});
  ctx.defer(() => kafka.stop());
  ctx.log(`Kafka ${kafka.version} on ${kafka.brokers.join(',')}`);
  return kafka;
}

/** When the broker's log says it started (serving clients), first time at or after `after`; local time, as the JVM writes it. */
export function brokerStartedAt(logFile: string, after: number): number | undefined {
  let text = '';
  try {
    text = readFileSync(logFile, 'utf8');
  } catch {
    return undefined;
  }
  for (const m of text.matchAll(/^\[(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d),(\d{3})\] INFO \[KafkaRaftServer nodeId=\d+\] Kafka Server started/gm)) {
    const t = new Date(`${m[1]}T${m[2]}.${m[3]}`).getTime();
    if (t >= after - 1_000) return t;
  }
  return undefined;
}
