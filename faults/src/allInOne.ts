import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { startLocalKafka, type KafkaHandle } from '@shopstream/testkit';
import { randomPort, startService, until, type Service } from './services.js';
import type { Context } from './types.js';
import { ownPostgres } from './ownPostgres.js';

export interface Shop {
  shopId: string;
  key: string;
  headers: Record<string, string>;
}

export interface AllInOne {
  service: Service;
  kafka: KafkaHandle;
  env: Record<string, string>;
  shops: Shop[];
  versions: { kafka: string; postgres: string };
}

/**
 * Its own PostgreSQL (the embedded mode's engine in a temporary directory) and its own broker, and the
 * all-in-one service on them as a separate process (every API and consumer in one process, as `pnpm start`),
 * with `shops` shops and a key for each. Everything is stopped when the scenario ends.
 */
export async function startAllInOne(ctx: Context, opts: { shops: number; env?: Record<string, string> }): Promise<AllInOne> {
  const pg = await ownPostgres(ctx, { poolSize: 1 });
  const pgVersion = pg.version;
  const kafka = await startLocalKafka({});
  ctx.defer(() => kafka.stop());
  ctx.log(`Kafka ${kafka.version} on ${kafka.brokers.join(',')}`);
  const shops = Array.from({ length: opts.shops }, () => {
    const shopId = randomUUID();
    const key = `faults_${randomBytes(24).toString('base64url')}`;
    return { shopId, key, headers: { authorization: `Bearer ${key}`, 'x-shop-id': shopId, 'content-type': 'application/json' } };
  });
  const env = {
    DATABASE_URL: pg.url,
    KAFKA_BROKERS: kafka.brokers.join(','),
    KAFKA_PARTITIONS: '3',
    BOOTSTRAP_API_KEYS: shops.map((s) => `${s.key}=${s.shopId}`).join(';'),
    LOG_LEVEL: 'warn',
    CURSOR_SECRET: 'faults-cursor-secret-0123456789abcdef',
    ...opts.env,
  };
  const service = startService(ctx.repoRoot, 'all-in-one', randomPort(), env);
  ctx.defer(() => service.kill());
  await until(async () => (await fetch(`${service.baseUrl}/readyz`, { signal: AbortSignal.timeout(3_000) })).status === 200, 180_000, `all-in-one ready (log ${service.logFile})`, 250);
  ctx.log(`all-in-one ready on ${service.baseUrl} (pid ${service.process.pid})`);
  return { service, kafka, env, shops, versions: { kafka: kafka.version, postgres: pgVersion } };
}

/** A process's memory from /proc/<pid>/status, in MiB: its resident set now and its peak (VmHWM). */
export function memoryOf(pid: number): { rssMiB: number; peakMiB: number } | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
    return { rssMiB: Math.round(kib('VmRSS') / 1024), peakMiB: Math.round(kib('VmHWM') / 1024) };
  } catch {
    return undefined;
  }
}
