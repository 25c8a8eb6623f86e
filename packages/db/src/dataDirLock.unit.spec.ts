import { mkdtempSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DataDirLockedError, lockDataDir } from './dataDirLock.js';

const dirs: string[] = [];
afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));
const tempDir = () => {
  const d = mkdtempSync(path.join(tmpdir(), 'datadir-lock-'));
  dirs.push(d);
  return d;
};

describe('lockDataDir', () => {
  it('refuses a second lock of one directory in the same process, and gives it again once released', () => {
    const dir = tempDir();
    const release = lockDataDir(dir);
    expect(() => lockDataDir(dir)).toThrow(DataDirLockedError);
    expect(() => lockDataDir(path.join(dir, '.', ''))).toThrow(DataDirLockedError);
    release();
    expect(existsSync(path.join(dir, 'shopstream.lock'))).toBe(false);
    lockDataDir(dir)();
  });

  it('takes over a lock left by a process that is gone, or by an earlier run with this pid (a container is always pid 1)', () => {
    const dir = tempDir();
    writeFileSync(path.join(dir, 'shopstream.lock'), '2147483646');
    lockDataDir(dir)();
    writeFileSync(path.join(dir, 'shopstream.lock'), String(process.pid));
    lockDataDir(dir)();
  });

  it('refuses a lock held by another live process', () => {
    const dir = tempDir();
    writeFileSync(path.join(dir, 'shopstream.lock'), String(process.ppid));
    expect(() => lockDataDir(dir)).toThrow(DataDirLockedError);
  });
});
