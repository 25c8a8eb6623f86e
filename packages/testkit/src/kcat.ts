import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { cacheRoot, findExecutable, log } from './proc.js';

/** How to run kcat: its path, and the environment it needs (the unpacked librdkafka's directory). */
export interface Kcat {
  bin: string;
  env: NodeJS.ProcessEnv;
}

/** Debian's packages: kcat and the two libraries it links that a machine without it lacks. */
const PACKAGES = ['kcat', 'librdkafka1', 'libyajl2'];

/**
 * kcat (librdkafka's command-line producer and consumer), to produce records as an outside producer would: the
 * one on PATH, else Debian's `kcat` with librdkafka1 and libyajl2, fetched once with `apt-get download` and unpacked
 * into the cache with dpkg-deb (nothing installed, no root), run with LD_LIBRARY_PATH on their libraries. Throws,
 * saying what to install, where neither works.
 */
export function ensureKcat(): Kcat {
  const onPath = findExecutable('kcat') ?? findExecutable('kafkacat');
  if (onPath) return { bin: onPath, env: process.env };
  const dir = path.join(cacheRoot(), 'kcat');
  const at = (root: string): Kcat => ({
    bin: path.join(root, 'usr/bin/kcat'),
    env: { ...process.env, LD_LIBRARY_PATH: [path.join(root, 'usr/lib/x86_64-linux-gnu'), process.env.LD_LIBRARY_PATH].filter(Boolean).join(':') },
  });
  if (existsSync(at(dir).bin)) return at(dir);
  const work = `${dir}.${process.pid}`;
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  try {
    const t0 = Date.now();
    execFileSync('apt-get', ['download', ...PACKAGES], { cwd: work, stdio: 'pipe', timeout: 300_000 });
    const debs = readdirSync(work).filter((f) => f.endsWith('.deb'));
    if (debs.length !== PACKAGES.length) throw new Error(`apt-get download ${PACKAGES.join(' ')} left ${debs.length} .deb files`);
    for (const deb of debs) {
      execFileSync('dpkg-deb', ['-x', deb, '.'], { cwd: work, stdio: 'pipe' });
      rmSync(path.join(work, deb));
    }
    execFileSync(at(work).bin, ['-V'], { env: at(work).env, stdio: 'pipe' });
    rmSync(dir, { recursive: true, force: true });
    renameSync(work, dir);
    log(`fetched kcat from Debian's kcat, librdkafka1 and libyajl2 packages in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    return at(dir);
  } catch (e) {
    rmSync(work, { recursive: true, force: true });
    throw new Error(`kcat is not on PATH and could not be fetched from Debian's kcat package (${(e as Error).message}); install kcat.`, { cause: e });
  }
}
