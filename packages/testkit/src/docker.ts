import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ContainerRuntimeClient } from 'testcontainers';
import { errorText } from './proc.js';

export type DockerProbe = { ok: true; client: ContainerRuntimeClient } | { ok: false; reason: string };

let probe: Promise<DockerProbe> | undefined;

/**
 * Whether a Docker engine answers, decided once per process. Machines without an engine are the common
 * case here (the docker CLI is installed, the daemon is not), so look for a hint of one before paying
 * for importing testcontainers, and bound testcontainers' own probe so a dead socket cannot hang a run.
 */
export function dockerEngine(): Promise<DockerProbe> {
  probe ??= detect();
  return probe;
}

async function detect(): Promise<DockerProbe> {
  if (process.env.SHOPSTREAM_TESTKIT_DOCKER === '0') {
    return { ok: false, reason: 'disabled by SHOPSTREAM_TESTKIT_DOCKER=0' };
  }
  const hint = engineHint();
  if (!hint) {
    return { ok: false, reason: 'no DOCKER_HOST, no ~/.testcontainers.properties and no Docker socket' };
  }
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    const client = await withTimeout(getContainerRuntimeClient(), 15_000, 'no answer within 15 s');
    return { ok: true, client };
  } catch (err) {
    return { ok: false, reason: `${hint} found, but the engine does not answer: ${errorText(err)}` };
  }
}

function engineHint(): string | undefined {
  if (process.env.DOCKER_HOST) return `DOCKER_HOST=${process.env.DOCKER_HOST}`;
  const props = path.join(os.homedir(), '.testcontainers.properties');
  if (existsSync(props) && /docker\.host|tc\.host/.test(readFileSync(props, 'utf8'))) return props;
  if (process.platform === 'win32') return 'Windows named pipe';
  const uid = os.userInfo().uid;
  const sockets = [
    '/var/run/docker.sock',
    process.env.XDG_RUNTIME_DIR ? path.join(process.env.XDG_RUNTIME_DIR, 'docker.sock') : '',
    path.join(os.homedir(), '.docker', 'run', 'docker.sock'),
    path.join(os.homedir(), '.docker', 'desktop', 'docker.sock'),
    `/run/user/${uid}/docker.sock`,
  ].filter(Boolean);
  return sockets.find((s) => existsSync(s));
}

function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Stops and removes a container started by an earlier process (`pnpm infra down`). */
export async function removeContainer(id: string): Promise<void> {
  const docker = await dockerEngine();
  if (!docker.ok) throw new Error(`cannot remove container ${id}: ${docker.reason}`);
  const container = docker.client.container.getById(id);
  try {
    await docker.client.container.stop(container, { timeout: 10 });
  } catch {
    // already stopped
  }
  await docker.client.container.remove(container, { removeVolumes: true });
}
