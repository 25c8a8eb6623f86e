import { readFileSync } from 'node:fs';
import { ConfigError, type Env } from './index.js';

/** The variables a Kafka connection's security is read from: a service's configuration slice may hold just these. */
export type KafkaConnectionSettings = Pick<
  Env,
  | 'KAFKA_SSL'
  | 'KAFKA_SSL_CA_FILE'
  | 'KAFKA_SSL_CERT_FILE'
  | 'KAFKA_SSL_KEY_FILE'
  | 'KAFKA_SASL_MECHANISM'
  | 'KAFKA_SASL_USERNAME'
  | 'KAFKA_SASL_USERNAME_FILE'
  | 'KAFKA_SASL_PASSWORD'
  | 'KAFKA_SASL_PASSWORD_FILE'
  | 'KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL'
  | 'KAFKA_SASL_OAUTHBEARER_CLIENT_ID'
  | 'KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET'
  | 'KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE'
  | 'KAFKA_SASL_OAUTHBEARER_SCOPE'
  | 'KAFKA_SASL_OAUTHBEARER_TOKEN_FILE'
  | 'KAFKA_SASL_OAUTHBEARER_EXTENSIONS'
>;

/**
 * SASL as both Kafka adapters take it (@shopstream/bus's KafkaSasl): a username and password, or for OAUTHBEARER
 * where the tokens come from (each adapter asks its provider, oauthBearerTokens, at every authentication).
 */
export type KafkaSasl =
  | { mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512'; username: string; password: string }
  | {
      mechanism: 'oauthbearer';
      oauth: { tokenEndpointUrl?: string; clientId?: string; clientSecret?: string; scope?: string; tokenFile?: string; extensions?: Record<string, string> };
    };

/**
 * How the Kafka clients reach the brokers beyond their addresses: TLS (an object, possibly empty: the system's
 * CAs) with the PEM contents of KAFKA_SSL_CA_FILE / _CERT_FILE / _KEY_FILE, and SASL. Both undefined: plaintext.
 */
export interface KafkaConnection {
  tls?: { ca?: string; cert?: string; key?: string };
  sasl?: KafkaSasl;
}

type Read = (file: string) => string;
const readText: Read = (file) => readFileSync(file, 'utf8');

/** A file's text, or a ConfigError naming the variable that pointed at it and why it cannot be read. */
function fromFile(variable: string, file: string, read: Read): string {
  try {
    return read(file);
  } catch (e) {
    throw new ConfigError(`${variable}=${file} cannot be read: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** A secret given directly or as a file (`NAME_FILE`, a mounted secret; its trailing newline dropped), never both. */
function secret(
  env: KafkaConnectionSettings,
  name: 'KAFKA_SASL_USERNAME' | 'KAFKA_SASL_PASSWORD' | 'KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET',
  read: Read,
): string | undefined {
  const direct = env[name];
  const file = env[`${name}_FILE`];
  if (direct !== undefined && file !== undefined) throw new ConfigError(`set ${name} or ${name}_FILE, not both`);
  if (file !== undefined) return fromFile(`${name}_FILE`, file, read).replace(/\r?\n$/, '');
  return direct;
}

/**
 * The TLS and SASL settings of KAFKA_SSL* and KAFKA_SASL_*, files read: what every Kafka client of the process
 * (the bus of either adapter) connects with. KAFKA_SSL=true or any of the certificate files turns TLS on. A client
 * certificate without its key (or the other way round), a mechanism without a username or password, or a
 * username without a mechanism is a ConfigError naming the variables.
 */
export function kafkaConnection(env: KafkaConnectionSettings, read: Read = readText): KafkaConnection {
  const out: KafkaConnection = {};
  const { KAFKA_SSL_CA_FILE: caFile, KAFKA_SSL_CERT_FILE: certFile, KAFKA_SSL_KEY_FILE: keyFile } = env;
  if ((certFile === undefined) !== (keyFile === undefined)) {
    throw new ConfigError('KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE go together (a client certificate and its private key)');
  }
  if (env.KAFKA_SSL || caFile !== undefined || certFile !== undefined) {
    out.tls = {
      ...(caFile !== undefined ? { ca: fromFile('KAFKA_SSL_CA_FILE', caFile, read) } : {}),
      ...(certFile !== undefined ? { cert: fromFile('KAFKA_SSL_CERT_FILE', certFile, read) } : {}),
      ...(keyFile !== undefined ? { key: fromFile('KAFKA_SSL_KEY_FILE', keyFile, read) } : {}),
    };
  }
  const username = secret(env, 'KAFKA_SASL_USERNAME', read);
  const password = secret(env, 'KAFKA_SASL_PASSWORD', read);
  const mechanism = env.KAFKA_SASL_MECHANISM;
  if (mechanism === undefined) {
    if (username !== undefined || password !== undefined) {
      throw new ConfigError('KAFKA_SASL_USERNAME / KAFKA_SASL_PASSWORD are set without KAFKA_SASL_MECHANISM (plain, scram-sha-256 or scram-sha-512)');
    }
    return out;
  }
  if (mechanism === 'oauthbearer') {
    if (username !== undefined || password !== undefined) {
      throw new ConfigError(
        'KAFKA_SASL_MECHANISM=oauthbearer takes no KAFKA_SASL_USERNAME / KAFKA_SASL_PASSWORD: its tokens come from KAFKA_SASL_OAUTHBEARER_*',
      );
    }
    out.sasl = { mechanism, oauth: oauthSettings(env, read) };
    return out;
  }
  if (!username || password === undefined) {
    throw new ConfigError(`KAFKA_SASL_MECHANISM=${mechanism} needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD (or their _FILE variants)`);
  }
  out.sasl = { mechanism, username, password };
  return out;
}

/**
 * Where OAUTHBEARER's tokens come from: KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL with the client's id and secret
 * (the client credentials grant; a scope if the endpoint wants one), or KAFKA_SASL_OAUTHBEARER_TOKEN_FILE; exactly
 * one of them. KAFKA_SASL_OAUTHBEARER_EXTENSIONS: `key=value` pairs, comma-separated, sent with the token.
 */
function oauthSettings(env: KafkaConnectionSettings, read: Read): Extract<KafkaSasl, { mechanism: 'oauthbearer' }>['oauth'] {
  const url = env.KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL;
  const tokenFile = env.KAFKA_SASL_OAUTHBEARER_TOKEN_FILE;
  const clientId = env.KAFKA_SASL_OAUTHBEARER_CLIENT_ID;
  const clientSecret = secret(env, 'KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET', read);
  if ((url === undefined) === (tokenFile === undefined)) {
    throw new ConfigError(
      'KAFKA_SASL_MECHANISM=oauthbearer needs exactly one of KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL (with its client id and secret) and KAFKA_SASL_OAUTHBEARER_TOKEN_FILE',
    );
  }
  const extensions = parseExtensions(env.KAFKA_SASL_OAUTHBEARER_EXTENSIONS);
  if (tokenFile !== undefined) {
    if (clientId !== undefined || clientSecret !== undefined) {
      throw new ConfigError('KAFKA_SASL_OAUTHBEARER_TOKEN_FILE takes no client id or secret: the file holds the token');
    }
    return { tokenFile, ...(extensions ? { extensions } : {}) };
  }
  if (!clientId || !clientSecret) {
    throw new ConfigError(
      'KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL needs KAFKA_SASL_OAUTHBEARER_CLIENT_ID and KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET (or its _FILE variant)',
    );
  }
  const scope = env.KAFKA_SASL_OAUTHBEARER_SCOPE;
  return { tokenEndpointUrl: url, clientId, clientSecret, ...(scope ? { scope } : {}), ...(extensions ? { extensions } : {}) };
}

function parseExtensions(text: string | undefined): Record<string, string> | undefined {
  if (text === undefined || text.trim() === '') return undefined;
  const out: Record<string, string> = {};
  for (const pair of text.split(',')) {
    const at = pair.indexOf('=');
    const key = pair.slice(0, at).trim();
    // RFC 7628 §3.1: a key is letters only; `auth` is the token's own.
    if (at < 1 || !/^[A-Za-z]+$/.test(key) || key === 'auth') {
      throw new ConfigError(`KAFKA_SASL_OAUTHBEARER_EXTENSIONS: "${pair.trim()}" is not key=value (a key of letters, not "auth")`);
    }
    out[key] = pair.slice(at + 1).trim();
  }
  return out;
}
