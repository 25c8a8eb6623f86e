import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { connectPostgres, sql, type Db } from '@shopstream/db';
import { ensureKafka, ensurePostgres, type KafkaHandle, type PostgresHandle } from '@shopstream/testkit';
import { hostFigures, type HostFigures } from '@shopstream/testkit/measurementRun';

export const REPO_ROOT = path.resolve(fileURLToPath(new URL('.', import.meta.url)), '../..');

export interface Infra {
  brokers: string[];
  /** URL of the server's `postgres` database: new databases are made from it. */
  adminUrl: string;
  kafkaVersion: string;
  /** The local broker's process, when known (started here, or by `pnpm infra up`): its CPU is metered apart. */
  brokerPid?: number;
  postgresVersion: string;
  postgresSettings: Record<string, string>;
  stop(): Promise<void>;
}

/**
 * The broker and the database server, found as the tests find them: KAFKA_BROKERS / DATABASE_URL, else
 * Docker, else local programs. Local ones are started with the 'dev' profile (full JIT for the broker,
 * fsync on for Postgres), which is what a benchmark needs.
 */
export async function openInfra(): Promise<Infra> {
  const kafka: KafkaHandle = await ensureKafka({ profile: 'dev' });
  let postgres: PostgresHandle;
  try {
    postgres = await ensurePostgres({ profile: 'dev' });
  } catch (e) {
    await kafka.stop();
    throw e;
  }
  const admin = new URL(postgres.url);
  admin.pathname = '/postgres';
  const settings = await withDb(admin.toString(), async (db) => {
    const names = ['server_version', 'shared_buffers', 'fsync', 'synchronous_commit', 'work_mem', 'max_connections'];
    const rows = await db.query(sql`SELECT name, setting, unit FROM pg_settings WHERE name = ANY(${names})`);
    return Object.fromEntries(rows.map((r) => [r.name as string, r.unit ? `${r.setting} ${r.unit}` : (r.setting as string)]));
  });
  return {
    brokers: kafka.brokers,
    adminUrl: admin.toString(),
    kafkaVersion: kafka.source === 'env' ? (infraState(kafka.brokers)?.version ?? kafka.version) : kafka.version,
    brokerPid: kafka.pid ?? (kafka.source === 'env' ? infraState(kafka.brokers)?.pid : undefined),
    postgresVersion: settings.server_version ?? postgres.version,
    postgresSettings: settings,
    async stop() {
      await Promise.allSettled([kafka.stop(), postgres.stop()]);
    },
  };
}

/**
 * `pnpm infra up` records the version and pid of the broker it started (the broker protocol kafkajs speaks does
 * not tell the version).
 */
function infraState(brokers: string[]): { version?: string; pid?: number } | undefined {
  try {
    const state = JSON.parse(readFileSync(path.join(REPO_ROOT, '.infra/state.json'), 'utf8'));
    if (JSON.stringify(state.kafka.brokers) !== JSON.stringify(brokers)) return undefined;
    return {
      version: state.kafka.version === undefined ? undefined : String(state.kafka.version),
      pid: typeof state.kafka.pid === 'number' ? state.kafka.pid : undefined,
    };
  } catch {
    // No state file: the broker came from elsewhere, and its version stays unknown.
  }
  return undefined;
}

/** A small pool on url for the duration of fn. */
export async function withDb<T>(url: string, fn: (db: Db) => Promise<T>): Promise<T> {
  const db = connectPostgres({ url, poolSize: 2, applicationName: 'shopstream-bench' });
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}

export function databaseUrl(adminUrl: string, name: string): string {
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  return u.toString();
}

export async function databaseExists(adminUrl: string, name: string): Promise<boolean> {
  return withDb(adminUrl, async (db) => (await db.query(sql`SELECT 1 AS x FROM pg_database WHERE datname = ${name}`)).length === 1);
}

/** A fresh, empty database `name` (dropped first when it exists); its URL. */
export async function freshDatabase(adminUrl: string, name: string): Promise<string> {
  await withDb(adminUrl, async (db) => {
    await db.query(sql`DROP DATABASE IF EXISTS ${sql.ident(name)} WITH (FORCE)`);
    await db.query(sql`CREATE DATABASE ${sql.ident(name)}`);
  });
  return databaseUrl(adminUrl, name);
}

export async function dropDatabase(adminUrl: string, name: string): Promise<void> {
  await withDb(adminUrl, (db) => db.query(sql`DROP DATABASE IF EXISTS ${sql.ident(name)} WITH (FORCE)`));
}

export interface Machine extends HostFigures {
  os: string;
  kafka: string;
  postgres: string;
  postgresSettings: Record<string, string>;
}

export function machine(infra: Infra): Machine {
  return {
    ...hostFigures(),
    os: `${os.type()} ${os.release()}`,
    kafka: infra.kafkaVersion,
    postgres: infra.postgresVersion,
    postgresSettings: infra.postgresSettings,
  };
}
