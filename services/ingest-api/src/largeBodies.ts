import type { RequestHandler } from 'express';
import { ApiError } from '@shopstream/http';
import { counter } from '@shopstream/telemetry';
import type { IncomingMessage } from 'node:http';

export interface LargeBodyLimits {
  /** A body over this many bytes, or of unknown length (chunked), is large. */
  thresholdBytes: number;
  /** Large bodies read and handled at once. */
  max: number;
  /** How long a large body may wait for its turn before it is answered 503. */
  waitMs: number;
}

const largeBodies = counter(
  'shopstream_ingest_large_bodies_total',
  'Ingest request bodies over INGEST_LARGE_BODY_BYTES (or of unknown length), by outcome: admitted (at once), waited (admitted after waiting its turn), shed (503: no turn within INGEST_LARGE_BODY_WAIT_MS).',
  ['outcome'],
);

/** Seconds a shed large body is told to wait: about the time one large body takes to handle. */
const RETRY_AFTER_SECONDS = 2;

/** A body over `thresholdBytes`, or of unknown length (chunked). */
export function isLarge(req: IncomingMessage, thresholdBytes: number): boolean {
  const length = req.headers['content-length'];
  return length === undefined || Number(length) > thresholdBytes;
}

/**
 * At most `max` large bodies read, parsed and handled at a time: parsing and validating a 6 MB bulk body holds
 * the event loop for a long while, and twenty at once held it for seconds, so small requests waited behind them
 * (p99 up to 27 s). The turn is taken before the body is read, so a waiting body stays in the socket's buffers
 * (TCP pushes back on its sender) rather than in memory; one that waits past `waitMs` gets 503 `unavailable` with
 * Retry-After, which producer clients retry. Small bodies never wait.
 */
export function largeBodyGate(limits: LargeBodyLimits): RequestHandler {
  let running = 0;
  const waiting: (() => void)[] = [];
  const release = () => {
    const next = waiting.shift();
    if (next) next();
    else running--;
  };
  return (req, res, next) => {
    if (!isLarge(req, limits.thresholdBytes)) return next();
    // Released once, when the response is done or the client has gone (`close` follows `finish` and aborts alike).
    const admit = (outcome: 'admitted' | 'waited') => {
      largeBodies.inc({ outcome });
      res.once('close', release);
      next();
    };
    if (running < limits.max) {
      running++;
      return admit('admitted');
    }
    let timer: NodeJS.Timeout | undefined = undefined;
    const turn = () => {
      clearTimeout(timer);
      req.off('close', gone);
      admit('waited');
    };
    // A client that gives up while waiting gives its place up too.
    const gone = () => {
      clearTimeout(timer);
      const i = waiting.indexOf(turn);
      if (i >= 0) waiting.splice(i, 1);
    };
    timer = setTimeout(() => {
      gone();
      req.off('close', gone);
      largeBodies.inc({ outcome: 'shed' });
      next(
        new ApiError(
          'unavailable',
          `Too many large bodies are being handled; retry after ${RETRY_AFTER_SECONDS} seconds (or send fewer, smaller events per request).`,
          {},
          { 'Retry-After': String(RETRY_AFTER_SECONDS), Connection: 'close' },
        ),
      );
    }, limits.waitMs);
    req.once('close', gone);
    waiting.push(turn);
  };
}
