import { describe, expect, it } from 'vitest';
import { startTracing, tracingEnabled } from './index.js';

describe('startTracing', () => {
  it('starts nothing unless OTEL_TRACES_EXPORTER asks for otlp (unset, none, or the SDK disabled)', async () => {
    expect(await startTracing('t', {})).toBe(false);
    expect(await startTracing('t', { OTEL_TRACES_EXPORTER: 'none' })).toBe(false);
    expect(await startTracing('t', { OTEL_TRACES_EXPORTER: ' None ', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' })).toBe(false);
    expect(await startTracing('t', { OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' })).toBe(false);
    expect(tracingEnabled()).toBe(false);
  });

  it('refuses an exporter it does not ship, naming it, before loading anything', async () => {
    await expect(startTracing('t', { OTEL_TRACES_EXPORTER: 'zipkin' })).rejects.toThrow(
      'OTEL_TRACES_EXPORTER=zipkin: only otlp (OTLP over HTTP) or none is supported',
    );
    await expect(startTracing('t', { OTEL_TRACES_EXPORTER: 'otlp,console' })).rejects.toThrow(/only otlp/);
    expect(tracingEnabled()).toBe(false);
  });
});
