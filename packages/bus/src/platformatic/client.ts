import { SASLMechanisms } from '@platformatic/kafka';
import type { KafkaBusBaseOptions } from '../kafkaCommon.js';
import type { KafkaSasl } from '../kafka/security.js';
import { oauthBearerTokens } from '../kafka/oauthBearer.js';

/** What the @platformatic/kafka adapter's clients share: their connection settings, and helpers. */

const SASL_MECHANISMS = {
  plain: SASLMechanisms.PLAIN,
  'scram-sha-256': SASLMechanisms.SCRAM_SHA_256,
  'scram-sha-512': SASLMechanisms.SCRAM_SHA_512,
  oauthbearer: SASLMechanisms.OAUTHBEARER,
} as const satisfies Record<KafkaSasl['mechanism'], string>;

/** SASL in @platformatic/kafka's words; an OAUTHBEARER token is asked of the provider at each authentication. */
function saslOf(sasl: KafkaSasl) {
  if (sasl.mechanism !== 'oauthbearer') return { mechanism: SASL_MECHANISMS[sasl.mechanism], username: sasl.username, password: sasl.password };
  const { extensions } = sasl.oauth;
  return { mechanism: SASL_MECHANISMS.oauthbearer, token: oauthBearerTokens(sasl.oauth), ...(extensions ? { oauthBearerExtensions: extensions } : {}) };
}

/** The settings every client of the bus connects with: brokers, TLS, SASL, timeouts. */
export function clientBase(opts: KafkaBusBaseOptions, publishTimeoutMs: number) {
  const { tls, sasl } = opts.security ?? {};
  return {
    bootstrapBrokers: opts.brokers,
    // An empty tls object is TLS with the system's CAs, as KafkaSecurity says.
    ...(tls ? { tls } : {}),
    ...(sasl ? { sasl: saslOf(sasl) } : {}),
    connectTimeout: 3_000,
    requestTimeout: publishTimeoutMs,
    retryDelay: 100,
  };
}
export type ClientBase = ReturnType<typeof clientBase>;

/** Whether a Kafka error, or one it gathered, has this protocol error name (apiId), e.g. GROUP_ID_NOT_FOUND. */
export function hasApiError(e: unknown, apiId: string): boolean {
  return !!(e as { findBy?: (p: string, v: unknown) => unknown })?.findBy?.('apiId', apiId);
}

/** Closes a client and whatever streams it still has open (its close(true) overload returns no promise). */
export const forceClose = (c: { close(force: boolean, cb: (e?: Error | null) => void): void }) =>
  new Promise<void>((resolve, reject) => c.close(true, (e) => (e ? reject(e) : resolve())));

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function headersOf(h: Map<Buffer, Buffer> | Iterable<[Buffer | null, Buffer | null]>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of h) if (k) out[k.toString()] ??= v ? v.toString() : '';
  return out;
}
