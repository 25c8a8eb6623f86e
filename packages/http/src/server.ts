import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { Duplex } from 'node:stream';
import type { Express } from 'express';
import type { Logger } from '@shopstream/telemetry';

export interface RunningServer {
  server: http.Server;
  port: number;
  /** Stops taking connections and waits for requests in flight, at most timeoutMs. */
  close(timeoutMs?: number): Promise<void>;
}

/** The request line and headers together, Node's default: a longer URL (10,000 ids in `id__in`) is a 431. */
export const MAX_HEADER_BYTES = 16 * 1024;

/**
 * What Node's HTTP parser refuses before express sees the request (headers or URL too large, a malformed
 * request, a request that took too long to arrive): answered in the one error body with a request id, as
 * everything else is, instead of Node's bare status line with no body.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Duplex, logger: Logger): void {
  // A response on this connection still being sent, or sent as its last (the parser failed on bytes after it,
  // e.g. the rest of a body the server did not read): a second answer would be read as garbage after it.
  const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean; writableFinished?: boolean; shouldKeepAlive?: boolean } })._httpMessage;
  const answered = inFlight?.headersSent === true && (inFlight.writableFinished !== true || inFlight.shouldKeepAlive === false);
  if (err.code === 'ECONNRESET' || !socket.writable || answered) {
    socket.destroy();
    return;
  }
  const [status, code, message] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [
          431,
          'headers_too_large',
          `The request line and headers are larger than ${MAX_HEADER_BYTES} bytes: shorten the URL (fewer ids per request) or the headers.`,
        ]
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'request_timeout', 'The request did not arrive in time.']
        : [400, 'bad_request', 'The request is not valid HTTP/1.1.'];
  const requestId = randomUUID();
  logger.info({ request_id: requestId, status, code: err.code }, 'request refused by the HTTP parser');
  const body = JSON.stringify({ error: { code, message, request_id: requestId, fields: {} } });
  // The answer to a HEAD has the headers of the body but not the body (a client would read the body as the
  // start of a next response). The method is known from the bytes refused when they hold the request line.
  const head = (err as { rawPacket?: unknown }).rawPacket;
  const isHead = Buffer.isBuffer(head) && head.subarray(0, 5).toString('latin1') === 'HEAD ';
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n${isHead ? '' : body}`,
  );
}

/**
 * A request with an `Expect` other than `100-continue`: Node answers it itself, a 417 with an empty body and no
 * request id, before express sees it. Answered here in the error body instead (RFC 9110 allows the 417), and
 * the connection closed, since the body that may follow is not read.
 */
function answerExpectation(req: http.IncomingMessage, res: http.ServerResponse, logger: Logger): void {
  const requestId = randomUUID();
  logger.info({ request_id: requestId, status: 417, expect: String(req.headers.expect).slice(0, 100) }, 'request refused: unsupported Expect');
  const body = JSON.stringify({
    error: {
      code: 'expectation_failed',
      message: 'Only "Expect: 100-continue" is supported.',
      request_id: requestId,
      fields: { expect: 'Only 100-continue is supported.' },
    },
  });
  res.writeHead(417, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'x-request-id': requestId,
    connection: 'close',
  });
  res.end(req.method === 'HEAD' ? undefined : body);
}

/** What a client may take; each timeout is checked about every second, so it fires within a second of its limit. */
export interface ServerLimits {
  /** Until the request line and headers have arrived (half-sent headers holding connections): 408. */
  headersTimeoutMs: number;
  /** Until the whole request, body included, has arrived (a body sent at a byte a second): 408. */
  requestTimeoutMs: number;
  /** An idle keep-alive connection: longer than common load balancers' idle timeout, so they close first. */
  keepAliveTimeoutMs: number;
  /**
   * Connections the kernel holds until the process accepts them (capped by net.core.somaxconn). Node's default,
   * 511, overflows when many clients connect at once to a busy process: the kernel then drops their SYNs and
   * each client waits out its SYN retransmits (1, 3, 7, 15 s), silent, instead of being answered.
   */
  backlog: number;
}

export const DEFAULT_LIMITS: ServerLimits = { headersTimeoutMs: 10_000, requestTimeoutMs: 60_000, keepAliveTimeoutMs: 65_000, backlog: 4096 };

/**
 * Answers a request before it reaches express, or returns false to let express have it. For load that must
 * cost as little as possible, such as a producer far over its rate limit: it runs synchronously, on the raw
 * request, before any middleware (so it records its own metrics and log line: see recordShed).
 */
export type ShedHandler = (req: http.IncomingMessage, res: http.ServerResponse) => boolean;

export async function listen(
  app: Express,
  port: number,
  host: string,
  logger: Logger,
  limits: ServerLimits = DEFAULT_LIMITS,
  shed?: ShedHandler,
): Promise<RunningServer> {
  const server = http.createServer(
    {
      maxHeaderSize: MAX_HEADER_BYTES,
      // Node refuses a headers timeout above the request timeout.
      headersTimeout: Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs),
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      // Node checks the two timeouts above every 30 s by default: a 10 s limit could then take 40 s.
      connectionsCheckingInterval: 1_000,
    },
    shed ? (req, res) => void (shed(req, res) || app(req, res)) : app,
  );
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => answerClientError(err, socket, logger));
  server.on('checkExpectation', (req: http.IncomingMessage, res: http.ServerResponse) => answerExpectation(req, res, logger));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port, host, backlog: limits.backlog }, () => resolve());
  });
  const addr = server.address();
  const actual = typeof addr === 'object' && addr ? addr.port : port;
  logger.info({ port: actual, host }, 'listening');
  return {
    server,
    port: actual,
    async close(timeoutMs = 15_000) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const timer = setTimeout(() => server.closeAllConnections(), timeoutMs);
      await closed;
      clearTimeout(timer);
    },
  };
}
