import { type Bus } from '@shopstream/bus';
import { startOutboxRelay } from '@shopstream/projections';
import { counter, type Logger } from '@shopstream/telemetry';
import { runNextErasureJob, type ErasureDeps } from './erasureJobs.js';

const jobsRun = counter('shopstream_erasure_jobs_run_total', 'Erasure job runs the worker started (a retried job counts again).', []);

export interface ErasureWorker {
  /** Looks for a job now (a job was just queued). */
  kick(): void;
  /** Finishes the job in hand and stops. */
  stop(): Promise<void>;
}

/**
 * Runs erasure jobs: every pollMs, and at once when kicked, claims waiting jobs one at a time until none is left
 * (several workers share them: a claimed job's row is locked, SKIP LOCKED passes over it), and relays the
 * `erasures` records they left in the outbox. A job survives restarts: it is a row, taken again after a crash.
 */
export function startErasureWorker(deps: ErasureDeps & { bus: Bus; logger: Logger; pollMs: number }): ErasureWorker {
  const log = deps.logger.child({ component: 'erasure-worker' });
  const relay = startOutboxRelay({ db: deps.db, bus: deps.bus, topic: deps.erasuresTopic, logger: log, intervalMs: Math.max(deps.pollMs, 1_000) });
  let stopped = false;
  let wake: (() => void) | null = null;
  let kicked = false;
  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      if (kicked || stopped) return resolve();
      const t = setTimeout(resolve, ms);
      wake = () => (clearTimeout(t), resolve());
    }).then(() => {
      wake = null;
      kicked = false;
    });
  const loop = (async () => {
    while (!stopped) {
      try {
        const ran = await runNextErasureJob(deps, log);
        if (ran) {
          jobsRun.inc();
          await relay.relay().catch((e) => log.warn({ err: e }, 'erasures relay failed: retried on its timer'));
          continue;
        }
      } catch (e) {
        log.warn({ err: e }, 'erasure worker: could not look for jobs; trying again');
      }
      await sleep(deps.pollMs);
    }
  })();
  return {
    kick() {
      kicked = true;
      wake?.();
    },
    async stop() {
      stopped = true;
      wake?.();
      await loop;
      await relay.stop();
    },
  };
}
