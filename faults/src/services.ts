import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, openSync, closeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Context } from './types.js';

/**
 * One Shopstream service as its own process, started as `pnpm start` and the tests' spawns start them
 * (services/<name>/src/main.ts through tsx on the sources), so a kill -9 is a real one.
 */
export interface Service {
  name: string;
  port: number;
  baseUrl: string;
  process: ChildProcess;
  logFile: string;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * How a service is started: as production runs it, the compiled build (`pnpm build`, which `pnpm faults` runs
 * first: node on services/<name>/dist/main.js, a restart loads no compiler), or with FAULTS_FROM_SOURCE=1 the
 * TypeScript sources through tsx, as `pnpm start` does (each restart then also transpiles: 1-2 s more here).
 */
export const fromSource = process.env.FAULTS_FROM_SOURCE === '1';
/** FAULTS_PROFILE_DIR: V8 CPU profiles of the services (written when a service exits cleanly, not after a kill -9). */
const profileArgs = process.env.FAULTS_PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${process.env.FAULTS_PROFILE_DIR}`] : [];
const serviceArgs = (name: string) =>
  fromSource ? ['--conditions=@shopstream/source', '--import', 'tsx', `services/${name}/src/main.ts`] : [`services/${name}/dist/main.js`];

export function startService(repoRoot: string, name: string, port: number, env: Record<string, string>): Service {
  const dir = path.join(os.tmpdir(), 'shopstream-faults');
  mkdirSync(dir, { recursive: true });
  const logFile = path.join(dir, `${name}-${process.pid}-${Date.now()}.log`);
  const fd = openSync(logFile, 'a');
  const child = spawn(process.execPath, [...profileArgs, ...serviceArgs(name)], {
    cwd: repoRoot,
    // The per-key ingest limit is off unless the scenario sets it (noisy-neighbour): load comes from one key.
    env: { INGEST_RATE_LIMIT_PER_SECOND: '0', INGEST_RATE_LIMIT_PER_MINUTE: '0', ...process.env, ...env, PORT: String(port), HOST: '127.0.0.1' },
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return {
    name,
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    process: child,
    logFile,
    async kill(signal = 'SIGTERM') {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill(signal);
      const t = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(t);
    },
  };
}

/** Polls fn every intervalMs until it answers true; the time it took, or throws after timeoutMs. */
export async function until(fn: () => Promise<boolean>, timeoutMs: number, what: string, intervalMs = 100): Promise<number> {
  const t0 = Date.now();
  for (;;) {
    if (await fn().catch(() => false)) return Date.now() - t0;
    if (Date.now() - t0 > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export const randomPort = () => 20000 + Math.floor(Math.random() * 10000);

/**
 * What every scenario's services are given: its own PostgreSQL and brokers, its API keys (BOOTSTRAP_API_KEYS,
 * `key=shop[,shop...][;...]`), quiet logs and a fixed cursor secret; `extra` adds to or overrides these.
 */
export function serviceEnv(o: { databaseUrl: string; brokers: string[]; apiKeys: string }, extra: Record<string, string> = {}): Record<string, string> {
  return {
    DATABASE_URL: o.databaseUrl,
    KAFKA_BROKERS: o.brokers.join(','),
    BOOTSTRAP_API_KEYS: o.apiKeys,
    LOG_LEVEL: 'warn',
    CURSOR_SECRET: 'faults-cursor-secret-0123456789abcdef',
    ...extra,
  };
}

/** startService on a random port, killed when the scenario ends. */
export function startScenarioService(ctx: Context, name: string, env: Record<string, string>): Service {
  const service = startService(ctx.repoRoot, name, randomPort(), env);
  ctx.defer(() => service.kill());
  return service;
}

/** A response body parsed as JSON (bodies of several shapes, read field by field), or undefined when it is not JSON. */
export function jsonOrUndefined(text: string): any {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Whether the service answers GET /readyz with 200 within 3 s. */
export const isReady = async (s: Service): Promise<boolean> => (await fetch(`${s.baseUrl}/readyz`, { signal: AbortSignal.timeout(3_000) })).status === 200;

/** Waits until the service is ready; throws after timeoutMs, naming its log file. */
export const untilReady = (s: Service, timeoutMs: number, intervalMs?: number): Promise<number> =>
  until(() => isReady(s), timeoutMs, `${s.name} ready (log ${s.logFile})`, intervalMs);
