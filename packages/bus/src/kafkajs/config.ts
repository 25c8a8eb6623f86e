import { logLevel, type KafkaConfig, type LogEntry, type SASLOptions } from 'kafkajs';
import type { Logger } from '@shopstream/telemetry';
import { securityFailure, type KafkaSecurity } from '../kafka/security.js';
import { oauthBearerTokens } from '../kafka/oauthBearer.js';

/** The kafkajs adapter's connection settings and logging. */

// kafkajs warns at every producer start when an idempotent producer's retries are bounded. They are bounded
// on purpose: a send that cannot complete fails within publishTimeoutMs, so ingest answers 503 (nothing
// reported accepted) instead of holding the request; and the producer is replaced after any failed send
// (see replaceProducer), which is what the warning is about. Said once here rather than in every log.
const BOUNDED_RETRIES_WARNING = 'Limiting retries for the idempotent producer';

/**
 * kafkajs logs a refused password or an untrusted certificate at every connection attempt, three lines each, with
 * retries: pages of errors for one cause. The first is kept, as a warning in securityFailure's words; the rest go to
 * debug, and what failed says the cause once more (the start-up attempt's line, the publish's 503, the consumer's restart).
 */
export function kafkaLogger(logger: Logger) {
  let securityLogged = false;
  return () =>
    ({ level, log }: LogEntry) => {
      const { message, ...extra } = log;
      const expected = level === logLevel.WARN && message.startsWith(BOUNDED_RETRIES_WARNING);
      let fn: 'error' | 'warn' | 'debug' = level <= logLevel.ERROR ? 'error' : level === logLevel.WARN && !expected ? 'warn' : 'debug';
      const security = fn === 'error' ? securityFailure({ message: `${message} ${String(extra.error ?? '')}` }) : undefined;
      if (security) {
        fn = securityLogged ? 'debug' : 'warn';
        securityLogged = true;
        logger[fn]({ kafka: extra }, security);
        return;
      }
      logger[fn]({ kafka: extra }, message);
    };
}

/** SASL in kafkajs' words; an OAUTHBEARER token (and its extensions) is asked of the provider at each authentication. */
function saslOf(sasl: NonNullable<KafkaSecurity['sasl']>): SASLOptions {
  if (sasl.mechanism !== 'oauthbearer') return { ...sasl } as SASLOptions;
  const tokens = oauthBearerTokens(sasl.oauth);
  const { extensions } = sasl.oauth;
  return { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: await tokens(), ...(extensions ? { extensions } : {}) }) };
}

/** KafkaSecurity in kafkajs' words: `ssl` true for the system's CAs, else the PEM texts; `sasl` as given. */
export function connectionConfig(security: KafkaSecurity | undefined): Pick<KafkaConfig, 'ssl' | 'sasl'> {
  const tls = security?.tls;
  return {
    ...(tls ? { ssl: Object.keys(tls).length > 0 ? tls : true } : {}),
    // A copy: kafkajs adds its authenticator, holding the password, to the object it is given (authenticationProvider),
    // and a caller's object spread into another bus's settings would carry it there, with the old password.
    ...(security?.sasl ? { sasl: saslOf(security.sasl) } : {}),
  };
}
