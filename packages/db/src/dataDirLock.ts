import { mkdirSync, openSync, readFileSync, realpathSync, rmSync, writeSync, closeSync } from 'node:fs';
import path from 'node:path';

export class DataDirLockedError extends Error {
  constructor(
    readonly dataDir: string,
    readonly pid: number,
    message = `The embedded database in ${dataDir} is held by process ${pid} (PGlite admits one process at a time).`,
  ) {
    super(message);
    this.name = 'DataDirLockedError';
  }
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
};

const heldHere = new Set<string>();

/** The pid of the live process holding DATA_DIR, if one does. */
export function lockHolder(dataDir: string): number | undefined {
  let pid: number;
  try {
    pid = Number(readFileSync(path.join(dataDir, 'shopstream.lock'), 'utf8').trim());
  } catch {
    return undefined;
  }
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  if (pid === process.pid) return heldHere.has(realpathSync(dataDir)) ? pid : undefined;
  return alive(pid) ? pid : undefined;
}

/**
 * Takes DATA_DIR for this process: two PGlite instances on one directory would corrupt it. A lock left by
 * a process that died is taken over. Returns the release function.
 */
export function lockDataDir(dataDir: string): () => void {
  mkdirSync(dataDir, { recursive: true });
  const file = path.join(dataDir, 'shopstream.lock');
  // The file holds a pid, and a file with this process's own pid is taken over (a container's process is
  // always pid 1, so a lock left by the previous run looks like ours): what this process holds is kept here.
  const key = realpathSync(dataDir);
  if (heldHere.has(key)) throw new DataDirLockedError(dataDir, process.pid);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(file, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      heldHere.add(key);
      return () => {
        heldHere.delete(key);
        rmSync(file, { force: true });
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const pid = Number(readFileSync(file, 'utf8').trim());
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && alive(pid)) throw new DataDirLockedError(dataDir, pid);
      rmSync(file, { force: true });
    }
  }
  throw new Error(`Could not lock ${file}`);
}
