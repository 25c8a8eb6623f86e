import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { cacheRoot, findExecutable, log } from './proc.js';

/** Why the browser tests cannot run here, when they cannot: the test skips with this message. */
export class ChromiumUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ChromiumUnavailableError';
  }
}

/**
 * Debian's `chromium`, for the status page's browser test: the one installed, else installed now with apt-get
 * (root only: CI runs as root). The downloaded .debs are kept in the cache (apt's archive directory pointed
 * there), so a machine that lost the package installs it again without downloading it. Throws
 * ChromiumUnavailableError, saying why, where it can be neither found nor installed.
 */
export function ensureChromium(): string {
  const found = findExecutable('chromium', ['/usr/bin']);
  if (found) return found;
  if (process.getuid?.() !== 0) {
    throw new ChromiumUnavailableError('chromium is not installed and installing it needs root: run `apt-get install -y chromium`');
  }
  const archives = path.join(cacheRoot(), 'apt-archives');
  mkdirSync(path.join(archives, 'partial'), { recursive: true });
  const apt = (args: string[]) =>
    execFileSync('apt-get', ['-o', `Dir::Cache::Archives=${archives}`, ...args], {
      stdio: 'pipe',
      timeout: 900_000,
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    });
  const t0 = Date.now();
  try {
    try {
      apt(['install', '-y', '--no-install-recommends', 'chromium']);
    } catch {
      // A fresh machine's package lists may be missing or stale: refresh them once and try again.
      apt(['update']);
      apt(['install', '-y', '--no-install-recommends', 'chromium']);
    }
  } catch (e) {
    const err = e as Error & { stderr?: Buffer };
    const detail = err.stderr?.toString().trim().split('\n').slice(-3).join(' ') || err.message;
    throw new ChromiumUnavailableError(`apt-get install chromium failed: ${detail}`, { cause: e });
  }
  const bin = '/usr/bin/chromium';
  if (!existsSync(bin)) throw new ChromiumUnavailableError(`apt-get installed chromium but ${bin} is missing`);
  log(`installed chromium with apt-get in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return bin;
}
