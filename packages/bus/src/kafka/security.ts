/** The security of a Kafka adapter's connections: its settings, and why a connection failed for them. */
import type { OAuthBearerSettings } from './oauthBearer.js';

/**
 * TLS and SASL of every connection to the brokers, as @shopstream/config's kafkaConnection reads them from
 * KAFKA_SSL* and KAFKA_SASL_*: `tls` present (even empty: the system's CAs) is TLS; PEM texts, not paths.
 */
export interface KafkaSecurity {
  tls?: { ca?: string; cert?: string; key?: string };
  sasl?: KafkaSasl;
}

/**
 * SASL as both adapters take it: a username and password, or (OAUTHBEARER) where its tokens come from, as data
 * (a worker thread given it makes its own tokens: oauthBearerTokens).
 */
export type KafkaSasl =
  { mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512'; username: string; password: string } | { mechanism: 'oauthbearer'; oauth: OAuthBearerSettings };

/** Node's codes for a peer certificate that does not verify (tls.connect's errors). */
const UNTRUSTED_CERT =
  /^(SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT(_LOCALLY)?|CERT_HAS_EXPIRED|CERT_NOT_YET_VALID|CERT_UNTRUSTED|ERR_TLS_CERT_ALTNAME_INVALID)$/;

/** Node's messages for the same (kafkajs logs the message alone). */
const UNTRUSTED_CERT_MESSAGE =
  /unable to verify the first certificate|self[- ]signed certificate|unable to get (local )?issuer certificate|certificate has expired|Hostname\/IP does not match/;

/**
 * Why a Kafka client could not connect, in one sentence an operator can act on, when the cause is the
 * connection's security rather than the broker being away: the SASL credentials refused, the broker's
 * certificate not trusted, a TLS handshake with a listener that does not speak TLS. Undefined otherwise.
 * Walks the errors either client wraps (kafkajs: originalError, cause; @platformatic/kafka: errors, cause).
 */
export function securityFailure(e: unknown): string | undefined {
  const seen = new Set<unknown>();
  // A token that could not be obtained says more than the SASL failure wrapped around it.
  const token = findError(e, (x) => x.name === 'OAuthBearerTokenError');
  if (token) return `Kafka's SASL/OAUTHBEARER token could not be obtained (KAFKA_SASL_OAUTHBEARER_*): ${token.message}`;
  const walk = (err: unknown, depth: number): string | undefined => {
    if (!err || typeof err !== 'object' || depth > 8 || seen.has(err)) return undefined;
    seen.add(err);
    const x = err as { name?: string; code?: string; message?: string; errors?: unknown[]; cause?: unknown; originalError?: unknown };
    const message = x.message ?? '';
    if (x.name === 'KafkaJSSASLAuthenticationError' || /SASL|SCRAM|[Aa]uthentication failed|AUTHENTICATION_FAILED|ILLEGAL_SASL_STATE/.test(message)) {
      return `Kafka refused the SASL credentials (KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD or the OAUTHBEARER token): ${message}`;
    }
    if ((x.code && UNTRUSTED_CERT.test(x.code)) || UNTRUSTED_CERT_MESSAGE.test(message)) {
      return `Kafka's TLS certificate is not trusted (${x.code ? `${x.code}: ` : ''}${message}): set KAFKA_SSL_CA_FILE to the CA that signed it`;
    }
    if (/before secure TLS connection was established|wrong version number|packet length too long|EPROTO/.test(message)) {
      return `the TLS handshake with Kafka failed (${message}): does that listener speak TLS (KAFKA_SSL), or does it need a client certificate (KAFKA_SSL_CERT_FILE)?`;
    }
    for (const inner of [...(x.errors ?? []), x.originalError, x.cause]) {
      const found = walk(inner, depth + 1);
      if (found) return found;
    }
    return undefined;
  };
  return walk(e, 0);
}

type Walked = { name?: string; message?: string; errors?: unknown[]; cause?: unknown; originalError?: unknown };

/** The first error in e's chain (errors, originalError, cause: as either client wraps them) that matches. */
function findError(e: unknown, match: (x: Walked) => boolean): Walked | undefined {
  const seen = new Set<unknown>();
  const walk = (err: unknown, depth: number): Walked | undefined => {
    if (!err || typeof err !== 'object' || depth > 8 || seen.has(err)) return undefined;
    seen.add(err);
    const x = err as Walked;
    if (match(x)) return x;
    for (const inner of [...(x.errors ?? []), x.originalError, x.cause]) {
      const found = walk(inner, depth + 1);
      if (found) return found;
    }
    return undefined;
  };
  return walk(e, 0);
}
