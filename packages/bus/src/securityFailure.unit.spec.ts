import { describe, expect, it } from 'vitest';
import { securityFailure } from './kafka/security.js';
import { OAuthBearerTokenError } from './kafka/oauthBearer.js';

/** What the two clients throw, in the shapes seen against test/kafkaSecurity.spec.ts's broker. */
const named = (name: string, message: string, extra: Record<string, unknown> = {}) => Object.assign(new Error(message), { name, ...extra });

describe('securityFailure', () => {
  it("names a refused password in either client's shape", () => {
    const kafkajs = named('KafkaJSNonRetriableError', 'SASL SCRAM SHA512 authentication failed: invalid credentials', {
      originalError: named('KafkaJSSASLAuthenticationError', 'SASL SCRAM SHA512 authentication failed: invalid credentials'),
    });
    const platformatic = named('MultipleErrors', 'metadata failed 4 times.', { errors: [named('AuthenticationError', 'SASL authentication failed.')] });
    for (const e of [kafkajs, platformatic]) expect(securityFailure(e)).toMatch(/^Kafka refused the SASL credentials \(KAFKA_SASL_MECHANISM, .*\): SASL/);
  });

  it('names an OAUTHBEARER token that could not be obtained before the SASL failure wrapped around it', () => {
    const cause = new OAuthBearerTokenError('the OAuth token endpoint https://idp/token answered 401: {"error":"invalid_client"}');
    const platformatic = named('MultipleErrors', 'metadata failed 4 times.', {
      errors: [named('AuthenticationError', 'The SASL/OAUTHBEARER token provider threw an error.', { cause })],
    });
    const kafkajs = named('KafkaJSNonRetriableError', cause.message, { originalError: cause });
    for (const e of [kafkajs, platformatic]) {
      expect(securityFailure(e)).toBe(
        `Kafka's SASL/OAUTHBEARER token could not be obtained (KAFKA_SASL_OAUTHBEARER_*): the OAuth token endpoint https://idp/token answered 401: {"error":"invalid_client"}`,
      );
    }
  });

  it("names an untrusted certificate by Node's code or, as kafkajs logs it, by its message", () => {
    const byCode = named('Error', 'unable to verify the first certificate', { code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' });
    expect(securityFailure(named('KafkaJSConnectionError', 'Connection error', { cause: byCode }))).toBe(
      "Kafka's TLS certificate is not trusted (UNABLE_TO_VERIFY_LEAF_SIGNATURE: unable to verify the first certificate): set KAFKA_SSL_CA_FILE to the CA that signed it",
    );
    expect(securityFailure({ message: 'Connection error: self-signed certificate in certificate chain' })).toMatch(/^Kafka's TLS certificate is not trusted/);
  });

  it('names a TLS handshake with a listener that does not speak TLS', () => {
    expect(securityFailure(new Error('Client network socket disconnected before secure TLS connection was established'))).toMatch(
      /^the TLS handshake with Kafka failed .*KAFKA_SSL/,
    );
  });

  it('says nothing of a broker that is only away', () => {
    expect(securityFailure(named('KafkaJSConnectionError', 'Connection error: connect ECONNREFUSED 127.0.0.1:1', { code: 'ECONNREFUSED' }))).toBeUndefined();
    expect(securityFailure(new Error('Request timed out'))).toBeUndefined();
    expect(securityFailure(undefined)).toBeUndefined();
  });
});
