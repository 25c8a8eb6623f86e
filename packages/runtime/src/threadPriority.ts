import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';

/**
 * Lowers the scheduling priority of the calling thread alone (Linux: a thread's id is a pid to setpriority, and
 * /proc/thread-self names it) to `nice` (0-19): ingest's body workers and large-body producer thread call it, so
 * when the cores are short the event loop that answers HTTP is run first and large bodies wait, not the small
 * requests beside them; so does the all-in-one's consumer thread (CONSUMER_THREAD_NICE), so producers are answered
 * first and the projections catch up with what is left. Elsewhere (no /proc), or when refused, nothing changes;
 * answers whether it did.
 */
export function niceThisThread(nice: number): boolean {
  if (nice <= 0) return false;
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (!Number.isInteger(tid) || tid <= 0 || tid === process.pid) return false;
    setPriority(tid, Math.min(nice, 19));
    return true;
  } catch {
    return false;
  }
}
