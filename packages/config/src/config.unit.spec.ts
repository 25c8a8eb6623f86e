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
});
