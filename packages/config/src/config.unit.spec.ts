import { describe, expect, it } from 'vitest';
import { ConfigError, loadEnv, runningMode } from './index.js';

describe('loadEnv', () => {
  it('takes a variable set to nothing as unset (KAFKA_BROKERS= is not an empty broker list)', () => {
    const env = loadEnv({ KAFKA_BROKERS: '', DATABASE_URL: '  ', PORT: '' });
    expect(env.KAFKA_BROKERS).toBeUndefined();
    expect(env.DATABASE_URL).toBeUndefined();
    expect(env.PORT).toBe(8080);
    expect(runningMode(env)).toBe('embedded');
  });

  it('refuses an invalid value, naming it', () => {
    expect(() => loadEnv({ DATABASE_URL: 'not a url' })).toThrow(ConfigError);
    expect(() => loadEnv({ DATABASE_URL: 'not a url' })).toThrow(/DATABASE_URL/);
  });

  it('keeps derived topics 30 days unless DERIVED_TOPIC_RETENTION_MS says otherwise, and refuses a value that is not a positive integer', () => {
    expect(loadEnv({}).DERIVED_TOPIC_RETENTION_MS).toBe(2_592_000_000);
    expect(loadEnv({ DERIVED_TOPIC_RETENTION_MS: '3600000' }).DERIVED_TOPIC_RETENTION_MS).toBe(3_600_000);
    for (const bad of ['-1', '0', '1.5', 'forever']) {
      expect(() => loadEnv({ DERIVED_TOPIC_RETENTION_MS: bad })).toThrow(/DERIVED_TOPIC_RETENTION_MS/);
    }
  });
});
