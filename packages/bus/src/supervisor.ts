import { counter, trackConsumer, type Logger } from '@shopstream/telemetry';
import { ConsumerFailedError, type Bus, type ConsumeOptions, type Subscription } from './port.js';

const restarts = counter(
  'shopstream_consumer_restarts_total',
  'Consumers recreated by the supervisor after they died (crash, expulsion, non-retriable error), by cause.',
  ['group', 'reason'],
);

export interface SuperviseOptions {
  logger: Logger;
  /** The first wait before recreating a dead consumer; doubled after each failed attempt. Default 1 s. */
  initialBackoffMs?: number;
  /** The longest wait between attempts. Default 30 s. */
  maxBackoffMs?: number;
}

/**
 * Consumes as bus.consume does, and keeps consuming: a subscription that dies for good (Subscription.failed)
 * is replaced by a new one, after a backoff that doubles up to maxBackoffMs, forever, each death logged with
 * its cause and counted (shopstream_consumer_restarts_total). Its state feeds shopstream_consumer_up and the
 * liveness probe (trackConsumer). The first subscription is made before this resolves: a consumer that cannot
 * start at all is its caller's to retry.
 */
export async function superviseConsumer(bus: Bus, opts: ConsumeOptions, o: SuperviseOptions): Promise<Subscription> {
  const initial = o.initialBackoffMs ?? 1_000;
  const max = o.maxBackoffMs ?? 30_000;
  const log = o.logger.child({ group: opts.groupId });
  const health = trackConsumer(opts.groupId);
  let current: Subscription;
  let consuming = true;
  // The client's own restarts (the broker away) count as down too: liveness fails if they never succeed.
  const watched: ConsumeOptions = {
    ...opts,
    onRunning(running, cause) {
      opts.onRunning?.(running, cause);
      if (running === consuming) return;
      consuming = running;
      if (running) {
        health.up();
        log.info(`consumer of ${opts.groupId} consuming again`);
      } else {
        health.down();
        log.warn({ err: cause }, `consumer of ${opts.groupId} not consuming until its client has recovered`);
      }
    },
  };
  try {
    current = await bus.consume(watched);
  } catch (e) {
    health.remove();
    throw e;
  }
  health.up();
  let stopping = false;
  let currentStopped = false;
  let wakeStop: () => void = () => {};
  const stopped = new Promise<null>((resolve) => (wakeStop = () => resolve(null)));
  const wait = (ms: number) =>
    new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      void stopped.then(() => (clearTimeout(t), resolve()));
    });
  let fail!: (e: ConsumerFailedError) => void;
  const failed = new Promise<ConsumerFailedError>((resolve) => (fail = resolve));

  const loop = (async () => {
    let attempt = 0;
    for (;;) {
      const upAt = Date.now();
      const death = await Promise.race([current.failed, stopped]);
      if (!death) return;
      consuming = false;
      health.down();
      restarts.inc({ group: opts.groupId, reason: death.reason });
      // A consumer that ran longer than the longest wait starts over from the first one.
      if (Date.now() - upAt > max) attempt = 0;
      currentStopped = true;
      await current.stop().catch((e: unknown) => log.debug({ err: e }, 'stopping the dead consumer failed'));
      for (;;) {
        const ms = Math.min(max, initial * 2 ** attempt++);
        log.error(
          { err: death.cause ?? death, reason: death.reason, retry_in_ms: ms },
          `consumer of ${opts.groupId} died (${death.reason}); recreating it in ${ms} ms`,
        );
        await wait(ms);
        if (stopping) return;
        try {
          current = await bus.consume(watched);
          currentStopped = false;
          break;
        } catch (e) {
          log.error({ err: e, attempt }, `could not recreate the consumer of ${opts.groupId}: ${e instanceof Error ? e.message : String(e)}`);
        }
      }
      if (stopping) return;
      consuming = true;
      health.up();
      log.info({ reason: death.reason }, `consumer of ${opts.groupId} recreated`);
    }
  })().catch((e: unknown) => {
    // Only a bug gets here; the caller learns through `failed`, liveness through the gauge.
    health.down();
    fail(new ConsumerFailedError(opts.groupId, 'supervisor_failed', `the supervisor of ${opts.groupId} failed: ${String(e)}`, { cause: e }));
  });

  return {
    failed,
    async stop() {
      stopping = true;
      wakeStop();
      await loop;
      health.remove();
      if (!currentStopped) await current.stop();
    },
  };
}
