import { hostname } from 'node:os';
import { describe, expect, it } from 'vitest';
import { ConfigError, groupInstanceId, kafkaConnection, loadEnv, runningMode } from './index.js';

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

describe('groupInstanceId', () => {
  it('is KAFKA_GROUP_INSTANCE_ID, else <service>@<host>:<PORT>; none for `none` or PORT=0', () => {
    expect(groupInstanceId(loadEnv({ KAFKA_GROUP_INSTANCE_ID: 'replica-7' }), 'ingest-api')).toBe('replica-7');
    expect(groupInstanceId(loadEnv({ PORT: '8081' }), 'activity-projector')).toBe(`activity-projector@${hostname()}:8081`);
    expect(groupInstanceId(loadEnv({ KAFKA_GROUP_INSTANCE_ID: 'none' }), 'activity-projector')).toBeUndefined();
    expect(groupInstanceId(loadEnv({ PORT: '0' }), 'activity-projector')).toBeUndefined();
  });
});

describe('kafkaConnection', () => {
  const files: Record<string, string> = { '/ca.pem': 'CA', '/c.pem': 'CERT', '/c.key': 'KEY', '/pw': 'from-file\n' };
  const read = (f: string) => {
    if (!(f in files)) throw new Error(`ENOENT: no such file or directory, open '${f}'`);
    return files[f];
  };
  const of = (vars: Record<string, string>) => kafkaConnection(loadEnv(vars), read);

  it('is plaintext unless told otherwise', () => {
    expect(of({})).toEqual({});
  });

  it('KAFKA_SSL=true alone is TLS with the system CAs; the files add their PEM texts', () => {
    expect(of({ KAFKA_SSL: 'true' })).toEqual({ tls: {} });
    expect(of({ KAFKA_SSL_CA_FILE: '/ca.pem', KAFKA_SSL_CERT_FILE: '/c.pem', KAFKA_SSL_KEY_FILE: '/c.key' })).toEqual({
      tls: { ca: 'CA', cert: 'CERT', key: 'KEY' },
    });
  });

  it('SASL with a password given directly or from a file (its trailing newline dropped)', () => {
    const base = { KAFKA_SASL_MECHANISM: 'scram-sha-512', KAFKA_SASL_USERNAME: 'u' };
    expect(of({ ...base, KAFKA_SASL_PASSWORD: 'p' }).sasl).toEqual({ mechanism: 'scram-sha-512', username: 'u', password: 'p' });
    expect(of({ ...base, KAFKA_SASL_PASSWORD_FILE: '/pw' }).sasl).toEqual({ mechanism: 'scram-sha-512', username: 'u', password: 'from-file' });
  });

  it('refuses what cannot work, naming the variables', () => {
    expect(() => of({ KAFKA_SSL_CERT_FILE: '/c.pem' })).toThrow(/KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE go together/);
    expect(() => of({ KAFKA_SSL_CA_FILE: '/missing.pem' })).toThrow(/KAFKA_SSL_CA_FILE=\/missing.pem cannot be read: ENOENT/);
    expect(() => of({ KAFKA_SASL_MECHANISM: 'plain', KAFKA_SASL_USERNAME: 'u' })).toThrow(/needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD/);
    expect(() => of({ KAFKA_SASL_USERNAME: 'u', KAFKA_SASL_PASSWORD: 'p' })).toThrow(/without KAFKA_SASL_MECHANISM/);
    expect(() => of({ KAFKA_SASL_MECHANISM: 'plain', KAFKA_SASL_USERNAME: 'u', KAFKA_SASL_PASSWORD: 'p', KAFKA_SASL_PASSWORD_FILE: '/pw' })).toThrow(
      /KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE, not both/,
    );
    expect(() => loadEnv({ KAFKA_SASL_MECHANISM: 'gssapi' })).toThrow(/KAFKA_SASL_MECHANISM/);
  });

  it('OAUTHBEARER: tokens from a token endpoint (client id, secret or its file, scope, extensions) or from a file', () => {
    const endpoint = {
      KAFKA_SASL_MECHANISM: 'oauthbearer',
      KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL: 'https://idp.example.com/oauth2/token',
      KAFKA_SASL_OAUTHBEARER_CLIENT_ID: 'client',
    };
    expect(
      of({
        ...endpoint,
        KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE: '/pw',
        KAFKA_SASL_OAUTHBEARER_SCOPE: 'kafka',
        KAFKA_SASL_OAUTHBEARER_EXTENSIONS: 'logicalCluster=lkc-1, identityPoolId=pool-2',
      }).sasl,
    ).toEqual({
      mechanism: 'oauthbearer',
      oauth: {
        tokenEndpointUrl: 'https://idp.example.com/oauth2/token',
        clientId: 'client',
        clientSecret: 'from-file',
        scope: 'kafka',
        extensions: { logicalCluster: 'lkc-1', identityPoolId: 'pool-2' },
      },
    });
    expect(of({ KAFKA_SASL_MECHANISM: 'oauthbearer', KAFKA_SASL_OAUTHBEARER_TOKEN_FILE: '/run/token' }).sasl).toEqual({
      mechanism: 'oauthbearer',
      oauth: { tokenFile: '/run/token' },
    });
  });

  it('OAUTHBEARER: refuses what cannot work, naming the variables', () => {
    const o = { KAFKA_SASL_MECHANISM: 'oauthbearer' };
    const url = { KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL: 'https://idp.example.com/token' };
    expect(() => of(o)).toThrow(/needs exactly one of KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL .* and KAFKA_SASL_OAUTHBEARER_TOKEN_FILE/);
    expect(() => of({ ...o, ...url, KAFKA_SASL_OAUTHBEARER_TOKEN_FILE: '/t' })).toThrow(/exactly one of/);
    expect(() => of({ ...o, ...url, KAFKA_SASL_OAUTHBEARER_CLIENT_ID: 'c' })).toThrow(
      /needs KAFKA_SASL_OAUTHBEARER_CLIENT_ID and KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET/,
    );
    expect(() => of({ ...o, KAFKA_SASL_OAUTHBEARER_TOKEN_FILE: '/t', KAFKA_SASL_OAUTHBEARER_CLIENT_ID: 'c' })).toThrow(/takes no client id or secret/);
    expect(() => of({ ...o, KAFKA_SASL_OAUTHBEARER_TOKEN_FILE: '/t', KAFKA_SASL_USERNAME: 'u', KAFKA_SASL_PASSWORD: 'p' })).toThrow(
      /oauthbearer takes no KAFKA_SASL_USERNAME/,
    );
    expect(() => of({ ...o, KAFKA_SASL_OAUTHBEARER_TOKEN_FILE: '/t', KAFKA_SASL_OAUTHBEARER_EXTENSIONS: 'auth=x' })).toThrow(
      /KAFKA_SASL_OAUTHBEARER_EXTENSIONS: "auth=x" is not key=value/,
    );
    expect(() => loadEnv({ KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL: 'not a url' })).toThrow(/KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL/);
  });
});
