import { readFileSync } from 'node:fs';
import os from 'node:os';

const TICKS_PER_SECOND = 100;

function machineTicks(): { busy: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0];
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, idle, iowait = 0, irq = 0, softirq = 0, steal = 0] = f;
  const total = user + nice + system + idle + iowait + irq + softirq + steal;
  return { busy: total - idle - iowait, total };
}

function processTicks(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which may hold spaces, start after the last ')'.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(rest[11]) + Number(rest[12]);
  } catch {
    return 0;
  }
}

export interface CpuUse {
  /** Whole machine, as a share of all cores: 1.0 = every core busy. */
  machineBusy: number;
  /** Cores used by each named process (1.0 = one core). */
  processes: Record<string, number>;
  /** Cores used by everything else on the machine (the broker, Postgres, other people's work). */
  others: number;
  loadAvg1m: number;
}

/**
 * CPU use over a measurement, from /proc: how busy the machine was, how much of it was this benchmark's
 * own processes, and how much was everything else (Kafka, Postgres and anyone else's work).
 */
export function cpuMeter(pids: Record<string, number | undefined>): { stop(): CpuUse } {
  const m0 = machineTicks();
  const t0 = performance.now();
  const p0 = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, pid ? processTicks(pid) : 0]));
  return {
    stop() {
      const m1 = machineTicks();
      const seconds = (performance.now() - t0) / 1000;
      const cores = os.cpus().length;
      const machineBusy = (m1.busy - m0.busy) / Math.max(1, m1.total - m0.total);
      const processes: Record<string, number> = {};
      let ours = 0;
      for (const [k, pid] of Object.entries(pids)) {
        const used = pid ? (processTicks(pid) - p0[k]) / TICKS_PER_SECOND / seconds : 0;
        processes[k] = Number(used.toFixed(2));
        ours += used;
      }
      return {
        machineBusy: Number(machineBusy.toFixed(2)),
        processes,
        others: Number(Math.max(0, machineBusy * cores - ours).toFixed(2)),
        loadAvg1m: Number(os.loadavg()[0].toFixed(2)),
      };
    },
  };
}
