import type { ErrorCode } from '@shopstream/contracts';

const statusOf: Record<ErrorCode, number> = {
  validation_error: 400,
  invalid_json: 400,
  bad_request: 400,
  invalid_cursor: 400,
  invalid_shop: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  expectation_failed: 417,
  payload_too_large: 413,
  headers_too_large: 431,
  unsupported_media_type: 415,
  rate_limited: 429,
  unavailable: 503,
  internal_error: 500,
};

/** An error the client is meant to see: the error handler turns it into the envelope with its status. */
export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly fields: Record<string, unknown> = {},
    /** Extra response headers, e.g. Retry-After. */
    readonly headers: Record<string, string> = {},
  ) {
    // The client's error, not ours: no stack trace to capture. Capturing one was the costliest step of a 429
    // answered to a producer far over its limit (thousands a second); a 500 is never an ApiError.
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(message);
    Error.stackTraceLimit = limit;
    this.name = 'ApiError';
    this.status = statusOf[code];
  }
}

export const httpStatusOf = (code: ErrorCode): number => statusOf[code];

/**
 * Thrown by a handler that stopped working on a request because its client is gone (see clientGone): nothing
 * can be answered, and the error handler sends nothing. requestContext counts and logs the request as 499.
 */
export class ClientGone extends Error {
  constructor() {
    // Thrown by the thousand when a backlog of abandoned requests is worked off: no stack trace (as ApiError).
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super('the client closed its connection before the request was answered');
    Error.stackTraceLimit = limit;
    this.name = 'ClientGone';
  }
}

/**
 * Whether the response can no longer reach its client: the connection closed before it was sent (the client
 * gave up, or went away). Not `req.destroyed`: a request is destroyed once its body is read.
 */
export const clientGone = (res: { destroyed: boolean; writableFinished: boolean }): boolean => res.destroyed && !res.writableFinished;

const ON_DROPPED = Symbol('onDropped');
type Droppable = object & { [ON_DROPPED]?: (err: unknown) => void };

/**
 * Tells `fn` the error of a request the error handler drops unanswered because its client is gone (what it would
 * have answered, the client cannot see): a rate limit gives back the tokens of a request that failed, as it does for
 * a 5xx answered. Set once per response; a later call replaces it.
 */
export function onDroppedError(res: object, fn: (err: unknown) => void): void {
  (res as Droppable)[ON_DROPPED] = fn;
}

/** Calls the response's onDroppedError hook, if any, with the error dropped. */
export function droppedError(res: object, err: unknown): void {
  (res as Droppable)[ON_DROPPED]?.(err);
}
