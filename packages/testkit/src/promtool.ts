import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { cacheRoot, findExecutable, log } from './proc.js';

/**
 * Prometheus's `promtool`, to check an exposition as Prometheus would: the one on PATH, else the one of
 * Debian's `prometheus` package, fetched once with `apt-get download` (no root, nothing installed: the .deb is
 * unpacked into the cache with dpkg-deb). Throws, saying what to install, where neither works.
 */
export function ensurePromtool(): string {
  const onPath = findExecutable('promtool');
  if (onPath) return onPath;
  const dir = path.join(cacheRoot(), 'promtool');
  const bin = path.join(dir, 'usr/bin/promtool');
  if (existsSync(bin)) return bin;
  const work = `${dir}.${process.pid}`;
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  try {
    const t0 = Date.now();
    execFileSync('apt-get', ['download', 'prometheus'], { cwd: work, stdio: 'pipe', timeout: 300_000 });
    const deb = readdirSync(work).find((f) => f.endsWith('.deb'));
    if (!deb) throw new Error('apt-get download prometheus left no .deb');
    execFileSync('dpkg-deb', ['-x', deb, '.'], { cwd: work, stdio: 'pipe' });
    rmSync(path.join(work, deb));
    rmSync(dir, { recursive: true, force: true });
    renameSync(work, dir);
    log(`fetched promtool from Debian's prometheus package in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    return bin;
  } catch (e) {
    rmSync(work, { recursive: true, force: true });
    throw new Error(
      `promtool is not on PATH and could not be fetched from Debian's prometheus package (${(e as Error).message}); install promtool (package prometheus).`,
      { cause: e },
    );
  }
}
