import type { IncomingMessage } from 'node:http';
import { contextOf, getTracer, setSpanError, SpanKind, withSpan } from '@shopstream/telemetry';

/**
 * An HTTP server span (OpenTelemetry's HTTP conventions) continuing the request's `traceparent`, or a new trace
 * without one. `run` runs the request's handlers in it; `finish` names it after the route template and ends it.
 * Only when tracing is on.
 */
export function serverSpan(req: IncomingMessage, path: string): { run(next: () => void): void; finish(route: string, status: number): void } {
  const method = req.method ?? 'GET';
  const host = req.headers.host ?? '';
  const colon = host.lastIndexOf(':');
  const span = getTracer().startSpan(
    method,
    {
      kind: SpanKind.SERVER,
      attributes: {
        'http.request.method': method,
        'url.path': path,
        'url.scheme': 'http',
        ...(host ? { 'server.address': colon > 0 ? host.slice(0, colon) : host } : {}),
        ...(colon > 0 ? { 'server.port': Number(host.slice(colon + 1)) } : {}),
        ...(req.headers['user-agent'] ? { 'user_agent.original': req.headers['user-agent'] } : {}),
        ...(req.socket.remoteAddress ? { 'network.peer.address': req.socket.remoteAddress } : {}),
      },
    },
    contextOf(req.headers),
  );
  return {
    run: (next) => withSpan(span, next),
    finish(route, status) {
      span.updateName(`${method} ${route}`);
      span.setAttributes({ 'http.route': route, 'http.response.status_code': status });
      // A 4xx is the client's: the span's status stays unset (HTTP conventions for servers).
      if (status >= 500) setSpanError(span);
      span.end();
    },
  };
}
