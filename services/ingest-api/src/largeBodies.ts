import type { RequestHandler } from 'express';
import { ApiError } from '@shopstream/http';
import { counter } from '@shopstream/telemetry';
import type { IncomingMessage } from 'node:http';
import zlib from 'node:zlib';

export interface LargeBodyLimits {
  /** A body over this many bytes, or of unknown length (chunked), is large. */
  thresholdBytes: number;
  /** Large bodies read and handled at once. */
  max: number;
  /** How long a large body may wait for its turn before it is answered 503. */
  waitMs: number;
  /**
   * Bytes of large bodies taken per second (a token bucket holding one second's worth; 0: no limit). A body is
   * taken while the bucket is above zero and charged, once handled, the bytes read (decompressed), so one larger
   * than the bucket leaves it in debt and the next waits until it is paid off; one refused before it was read
   * costs nothing.
   */
  bytesPerSecond?: number;
  /** The clock the byte budget refills by (ms); the tests drive their own. */
  now?: () => number;
}

const largeBodies = counter(
  'shopstream_ingest_large_bodies_total',
  'Ingest request bodies over INGEST_LARGE_BODY_BYTES (or of unknown length), by outcome: admitted (at once), waited (admitted after waiting its turn), shed (503: no turn within INGEST_LARGE_BODY_WAIT_MS).',
  ['outcome'],
);

/** Seconds a shed large body is told to wait: about the time one large body takes to handle. */
const RETRY_AFTER_SECONDS = 2;

/**
 * Set on a request by whoever reads a large body as bytes and hands them on (the body pool moves them to a worker,
 * which leaves `req.body` empty): how many bytes were read.
 */
export const BYTES_READ = Symbol('large body bytes read');

/**
 * The bytes of a large body that were read: as its reader recorded them (BYTES_READ), or the body itself when it
 * is still there as bytes, else its Content-Length once the whole request arrived (parsed on the event loop), else 0.
 */
function bytesRead(req: IncomingMessage & { body?: unknown; [BYTES_READ]?: number }): number {
  if (req[BYTES_READ] !== undefined) return req[BYTES_READ];
  if (Buffer.isBuffer(req.body) && req.body.length > 0) return req.body.length;
  const length = Number(req.headers['content-length']);
  return req.complete && Number.isFinite(length) ? length : 0;
}

/** A body over `thresholdBytes`, or of unknown length (chunked). */
export function isLarge(req: IncomingMessage, thresholdBytes: number): boolean {
  const length = req.headers['content-length'];
  return length === undefined || Number(length) > thresholdBytes;
}

/**
 * At most `max` large bodies read, parsed and handled at a time, and at most `bytesPerSecond` of them taken per
 * second: parsing and validating a 6 MB bulk body holds the event loop for a long while, and twenty at once held it
 * for seconds, so small requests waited behind them (p99 up to 27 s); parsed in a worker, twenty producers sending
 * such bodies back to back still took the cores the small requests need (the broker writing 20 MB/s, the workers
 * parsing as much), and only a budget on what is taken bounds that. The turn is taken before the body is read, so a
 * waiting body stays in the socket's buffers (TCP pushes back on its sender) rather than in memory; one that waits
 * past `waitMs` gets 503 `unavailable` with Retry-After, which producer clients retry. Small bodies never wait.
 */
export function largeBodyGate(limits: LargeBodyLimits): RequestHandler {
  const now = limits.now ?? Date.now;
  const rate = limits.bytesPerSecond ?? 0;
  let running = 0;
  // The byte budget: tokens (bytes) at `filledAt`, at most one second's worth; below zero, in debt.
  let tokens = rate;
  let filledAt = now();
  const refill = () => {
    const t = now();
    tokens = Math.min(rate, tokens + ((t - filledAt) * rate) / 1000);
    filledAt = t;
  };
  const waiting: (() => void)[] = [];
  let refillTimer: NodeJS.Timeout | undefined = undefined;
  const canTake = () => {
    if (running >= limits.max) return false;
    if (rate === 0) return true;
    refill();
    return tokens > 0;
  };
  // Lets waiting bodies in, in order, while there is a turn and budget; when the budget is what they wait for, once
  // it is paid off.
  const admitWaiting = () => {
    while (waiting.length > 0 && canTake()) waiting.shift()!();
    if (waiting.length > 0 && running < limits.max && refillTimer === undefined) {
      refillTimer = setTimeout(
        () => {
          refillTimer = undefined;
          admitWaiting();
        },
        Math.max(1, Math.ceil((-tokens * 1000) / rate)),
      );
      refillTimer.unref();
    }
  };
  return (req, res, next) => {
    if (!isLarge(req, limits.thresholdBytes)) return next();
    const take = (outcome: 'admitted' | 'waited') => {
      running++;
      largeBodies.inc({ outcome });
      // Released once, when the response is done or the client has gone (`close` follows `finish` and aborts alike),
      // and charged then what was read: a body refused before it was read (413 past the size limit, 415) costs the
      // budget nothing, a compressed one what it inflated to.
      res.once('close', () => {
        running--;
        if (rate > 0) {
          refill();
          tokens -= bytesRead(req);
        }
        admitWaiting();
      });
      next();
    };
    if (waiting.length === 0 && canTake()) return take('admitted');
    let timer: NodeJS.Timeout | undefined = undefined;
    const turn = () => {
      clearTimeout(timer);
      req.off('close', gone);
      take('waited');
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
    admitWaiting();
  };
}

/** The content encodings body-parser decodes (zstd where this Node has it); any other it refuses unread (415). */
const DECODABLE = new Set([
  'identity',
  'deflate',
  'gzip',
  'br',
  ...(typeof (zlib as { createZstdDecompress?: unknown }).createZstdDecompress === 'function' ? ['zstd'] : []),
]);

/**
 * Refuses, before a body takes a turn at the large-body gate, what body-parser would refuse without reading it: a
 * Content-Encoding it cannot decode (415) and an uncompressed body whose Content-Length is past `limitBytes` (413),
 * as body-parser's own errors, so the answers are the same. Such a body used to wait for a turn like any large body,
 * and in a burst of them was answered 503 once INGEST_LARGE_BODY_WAIT_MS ran out (`pnpm faults bad-input --seed
 * 479780327`: 11 MiB bodies with a bogus Content-Encoding, 1 to 4 x 503 where a 415 or 413 was due).
 */
export function refuseUnreadable(limitBytes: number): RequestHandler {
  return (req, _res, next) => {
    const encoding = (req.headers['content-encoding'] ?? 'identity').toLowerCase();
    if (!DECODABLE.has(encoding))
      return next(
        Object.assign(new Error(`unsupported content encoding "${encoding}"`), {
          status: 415,
          statusCode: 415,
          expose: true,
          encoding,
          type: 'encoding.unsupported',
        }),
      );
    const length = Number(req.headers['content-length']);
    if (encoding === 'identity' && req.headers['content-length'] !== undefined && Number.isFinite(length) && length > limitBytes)
      return next(
        Object.assign(new Error('request entity too large'), {
          status: 413,
          statusCode: 413,
          expose: true,
          length,
          limit: limitBytes,
          type: 'entity.too.large',
        }),
      );
    next();
  };
}
