import { readFile } from 'node:fs/promises';
import { counter } from '@shopstream/telemetry';

const tokenRequests = counter(
  'shopstream_kafka_oauth_token_requests_total',
  'SASL/OAUTHBEARER tokens asked for (KAFKA_SASL_OAUTHBEARER_*), from the token endpoint or the token file, by outcome: ok or failed.',
  ['outcome'],
);

/**
 * SASL/OAUTHBEARER as Shopstream obtains its tokens (docs/operations.md#kafka-connection): from an OAuth 2.0 token
 * endpoint by the client credentials grant (RFC 6749 §4.4, as the Java client's KIP-768 login handler does), or
 * from a file another process keeps current (a sidecar, a Kubernetes projected token, a cloud's token signer).
 * Data only, so a worker thread can be given it and make its own tokens.
 */
export interface OAuthBearerSettings {
  tokenEndpointUrl?: string;
  clientId?: string;
  clientSecret?: string;
  scope?: string;
  tokenFile?: string;
  /** SASL extensions sent with the token (Confluent Cloud: logicalCluster, identityPoolId). */
  extensions?: Record<string, string>;
}

/** A token could not be obtained: the endpoint refused or failed, or the file could not be read. */
export class OAuthBearerTokenError extends Error {
  override name = 'OAuthBearerTokenError';
}

/** A token is asked for again once this share of its lifetime has passed (the Java client's default refresh window)... */
const REFRESH_AT = 0.8;
/**
 * ...or once only this much of it is left, whichever comes first (the Java client's sasl.login.refresh.buffer.seconds,
 * shorter): a connection is never handed a token about to end its session. kafkajs re-authenticates 10 s before a
 * session ends, and a session the broker gives a token with less left than that made it re-authenticate at once,
 * which the broker refused (ILLEGAL_SASL_STATE).
 */
const REFRESH_BUFFER_MS = 15_000;

/** When a token obtained at `now` that expires at `expiresAt` is asked for again. */
const refreshTime = (now: number, expiresAt: number) => Math.min(now + (expiresAt - now) * REFRESH_AT, expiresAt - REFRESH_BUFFER_MS);
/** A token whose lifetime neither the endpoint nor the token says is kept this long. */
const DEFAULT_LIFETIME_MS = 5 * 60_000;

/** The expiry a JWT states (`exp`, seconds), or undefined when the token is not a JWT or states none. */
export function jwtExpiryMs(token: string): number | undefined {
  const payload = token.split('.')[1];
  if (!payload) return undefined;
  try {
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { exp?: unknown };
    return typeof claims.exp === 'number' ? claims.exp * 1000 : undefined;
  } catch {
    return undefined;
  }
}

interface Token {
  value: string;
  refreshAt: number;
  /** When it stops working (Infinity: not known, a file's token without `exp`). */
  expiresAt: number;
}

/**
 * While a token is asked for again and that fails (the endpoint away, the file being rewritten), the one held is
 * handed out instead as long as this much of it is left: kafkajs re-authenticates this long before a session ends.
 */
const FALLBACK_LEFT_MS = 10_000;

async function fromEndpoint(s: OAuthBearerSettings, now: number): Promise<Token> {
  const url = s.tokenEndpointUrl!;
  const form = new URLSearchParams({ grant_type: 'client_credentials' });
  if (s.scope) form.set('scope', s.scope);
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        accept: 'application/json',
        // RFC 6749 §2.3.1: the client id and secret, form-encoded, as HTTP Basic credentials.
        authorization: `Basic ${Buffer.from(`${encodeURIComponent(s.clientId!)}:${encodeURIComponent(s.clientSecret!)}`).toString('base64')}`,
      },
      body: form,
      signal: AbortSignal.timeout(10_000),
    });
  } catch (e) {
    throw new OAuthBearerTokenError(`the OAuth token endpoint ${url} could not be reached: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  const text = await res.text();
  if (!res.ok) throw new OAuthBearerTokenError(`the OAuth token endpoint ${url} answered ${res.status}: ${text.slice(0, 300)}`);
  let body: { access_token?: unknown; expires_in?: unknown };
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    throw new OAuthBearerTokenError(`the OAuth token endpoint ${url} answered ${res.status} with no JSON: ${text.slice(0, 300)}`);
  }
  if (typeof body.access_token !== 'string' || body.access_token === '') {
    throw new OAuthBearerTokenError(`the OAuth token endpoint ${url} answered without an access_token`);
  }
  const value = body.access_token;
  const expiresAt = typeof body.expires_in === 'number' ? now + body.expires_in * 1000 : (jwtExpiryMs(value) ?? now + DEFAULT_LIFETIME_MS);
  return { value, refreshAt: refreshTime(now, expiresAt), expiresAt };
}

async function fromFile(s: OAuthBearerSettings, now: number): Promise<Token> {
  let value: string;
  try {
    value = (await readFile(s.tokenFile!, 'utf8')).trim();
  } catch (e) {
    throw new OAuthBearerTokenError(`KAFKA_SASL_OAUTHBEARER_TOKEN_FILE=${s.tokenFile} cannot be read: ${e instanceof Error ? e.message : String(e)}`, {
      cause: e,
    });
  }
  if (value === '') throw new OAuthBearerTokenError(`KAFKA_SASL_OAUTHBEARER_TOKEN_FILE=${s.tokenFile} is empty`);
  // Read again at most every 30 s, and before the token it holds expires: whoever keeps the file renews it.
  const expiresAt = jwtExpiryMs(value) ?? Infinity;
  return { value, refreshAt: Math.min(now + 30_000, refreshTime(now, expiresAt)), expiresAt };
}

/**
 * The token provider both adapters call for each authentication (a new connection, or a re-authentication the
 * broker asks for when a session's lifetime ends: connections.max.reauth.ms): the current token, obtained again
 * once REFRESH_AT of its lifetime has passed or REFRESH_BUFFER_MS of it is left. Concurrent connections share one
 * request. A failed request is counted and not kept: the token held goes on being handed out while FALLBACK_LEFT_MS
 * of it is left, and each authentication asks again; after that the failure is the authentication's.
 */
export function oauthBearerTokens(s: OAuthBearerSettings, now: () => number = Date.now): () => Promise<string> {
  let current: Token | undefined;
  let inFlight: Promise<Token> | undefined;
  return async () => {
    if (current && now() < current.refreshAt) return current.value;
    inFlight ??= (s.tokenFile ? fromFile(s, now()) : fromEndpoint(s, now()))
      .then(
        (t) => {
          tokenRequests.inc({ outcome: 'ok' });
          return t;
        },
        (e: unknown) => {
          tokenRequests.inc({ outcome: 'failed' });
          throw e;
        },
      )
      .finally(() => {
        inFlight = undefined;
      });
    try {
      current = await inFlight;
    } catch (e) {
      if (current && now() < current.expiresAt - FALLBACK_LEFT_MS) return current.value;
      throw e;
    }
    return current.value;
  };
}
