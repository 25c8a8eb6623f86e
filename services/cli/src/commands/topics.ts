import { withRuntime } from '../context.js';

export const usage = `Usage: pnpm cli topics ensure

Creates the topics Shopstream owns (events, metrics, flow-triggers, conversations and a .dlq for each),
with KAFKA_PARTITIONS partitions and KAFKA_REPLICATION replicas, under TOPIC_PREFIX. Existing topics are left as they are.`;

export async function run(args: string[]): Promise<number> {
  if (args[0] !== 'ensure') {
    console.error(usage);
    return 2;
  }
  // Opening the runtime ensures the topics: the same code path every service takes at start.
  await withRuntime(async (rt) => {
    const t = rt.topics;
    const names = [t.events, t.metrics, t.flowTriggers, t.conversations].flatMap((n) => [n, t.dlq(n)]);
    console.log(`Topics present on ${rt.bus.kind === 'kafka' ? rt.env.KAFKA_BROKERS?.join(',') : 'the Postgres log'}:\n  ${names.join('\n  ')}`);
  });
  return 0;
}
