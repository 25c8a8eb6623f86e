import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { KafkaHandle } from '@shopstream/testkit';
import { ownKafka } from './ownKafka.js';
import { serviceEnv, startScenarioService, untilReady, type Service } from './services.js';
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
  const kafka = await ownKafka(ctx);
  const shops = Array.from({ length: opts.shops }, () => {
    const shopId = randomUUID();
    const key = `faults_${randomBytes(24).toString('base64url')}`;
    return { shopId, key, headers: { authorization: `Bearer ${key}`, 'x-shop-id': shopId, 'content-type': 'application/json' } };
  });
  const env = serviceEnv(
    { databaseUrl: pg.url, brokers: kafka.brokers, apiKeys: shops.map((s) => `${s.key}=${s.shopId}`).join(';') },
    { KAFKA_PARTITIONS: '3', ...opts.env },
  );
  const service = startScenarioService(ctx, 'all-in-one', env);
  await untilReady(service, 180_000, 250);
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
