import { readdirSync, readFileSync } from 'node:fs';
import { getPriority } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { spawnBodyWorker } from './bodyPool.js';

/** The nice value of each thread of this process (Linux: the 19th field of /proc/self/task/<tid>/stat). */
function threadNices(): number[] {
  return readdirSync('/proc/self/task').flatMap((tid) => {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      return [Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16])];
    } catch {
      return [];
    }
  });
}

describe.runIf(process.platform === 'linux')('the body worker thread priority', () => {
  it('a body worker started with nice 7 runs its thread at 7; the process (its event loop) keeps its own', async () => {
    const before = getPriority();
    expect(threadNices()).not.toContain(7);
    const worker = spawnBodyWorker({ nice: 7 });
    try {
      while (!threadNices().includes(7)) await sleep(50);
      expect(getPriority()).toBe(before);
    } finally {
      await worker.terminate();
    }
  });
});
