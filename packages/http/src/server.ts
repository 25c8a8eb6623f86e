import http from 'node:http';
import type { Express } from 'express';
import type { Logger } from '@shopstream/telemetry';

export interface RunningServer {
  server: http.Server;
  port: number;
  /** Stops taking connections and waits for requests in flight, at most timeoutMs. */
  close(timeoutMs?: number): Promise<void>;
}

export async function listen(app: Express, port: number, host: string, logger: Logger): Promise<RunningServer> {
  const server = http.createServer(app);
  // Keep-alive longer than common load balancers' idle timeout, so they close first and no request races a close.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
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
