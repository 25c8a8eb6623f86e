import type { RequestHandler } from 'express';
import { isUuid } from '@shopstream/contracts';
import { ApiError } from './errors.js';
import type { ApiKeyStore } from './apiKeys.js';
import { counter } from '@shopstream/telemetry';

const BEARER = /^Bearer\s+(\S+)\s*$/i;

/** The secret of an `Authorization: Bearer <key>` header, or undefined when it is missing or malformed. */
export const bearerSecret = (header: string | undefined): string | undefined => BEARER.exec(header ?? '')?.[1];

const refused = counter(
  'shopstream_auth_refused_total',
  "Requests refused by API key authentication, by reason: malformed (no Bearer secret), unknown (unknown or revoked key, or not of a key's shape: the last cost no query), limited (429: too many failed look-ups from the client's address, not looked up).",
  ['reason'],
);

const unknownKey = () => new ApiError('unauthorized', 'The API key is unknown or revoked.', { authorization: 'Unknown or revoked key.' });

const limitedAddress = (wait: number) =>
  new ApiError(
    'rate_limited',
    `Too many unknown API keys from this address: this one was not checked. Retry after ${wait} seconds.`,
    { authorization: 'Not checked: too many failed authentications from this address.' },
    { 'Retry-After': String(wait) },
  );

/**
 * The refusal of a secret that needs neither a query nor express: 401 for a secret not of a key's shape or cached
 * as unknown, 429 for one this process has no answer for from an address out of failed look-ups. Undefined when
 * the secret must go the usual way; `address` undefined (not known without express) skips the address's budget.
 * For a shed handler, before the router (see ingest-api's shedUnknownKeys).
 */
export function refusalAtOnce(keys: ApiKeyStore, secret: string, address: string | undefined): ApiError | undefined {
  const hashed = keys.hashed(secret);
  const key = keys.cached(secret, hashed);
  if (key === null) {
    refused.inc({ reason: 'unknown' });
    return unknownKey();
  }
  if (key !== undefined || address === undefined || !keys.failures || keys.wasKnown(secret, hashed)) return undefined;
  const wait = keys.failures.retryAfterSeconds(address);
  if (wait === 0) return undefined;
  refused.inc({ reason: 'limited' });
  return limitedAddress(wait);
}

/**
 * `Authorization: Bearer <key>` (401 when missing, unknown or revoked), then `X-Shop-Id` (400
 * `invalid_shop` when missing or not a uuid), then the grant (403 when the key does not reach that shop).
 * A secret not of a key's shape is refused without a query; a secret the process has no answer for is looked up
 * only while the client's address has failed look-ups left (`keys.failures`): past that, 429 with Retry-After.
 */
export function requireAuth(keys: ApiKeyStore): RequestHandler {
  return async (req, _res, next) => {
    const secret = bearerSecret(req.get('authorization'));
    if (secret === undefined) {
      refused.inc({ reason: 'malformed' });
      return next(new ApiError('unauthorized', 'Send your API key as Authorization: Bearer <key>.', { authorization: 'Missing or malformed.' }));
    }
    const hashed = keys.hashed(secret);
    let key = keys.cached(secret, hashed);
    if (key === undefined) {
      // A key that worked here before is refreshed whatever the address did: it is the valid caller's query.
      const address = req.ip ?? req.socket.remoteAddress ?? '';
      const failures = keys.wasKnown(secret, hashed) ? undefined : keys.failures;
      const wait = failures ? failures.take(address) : 0;
      if (wait > 0) {
        refused.inc({ reason: 'limited' });
        return next(limitedAddress(wait));
      }
      key = await keys.resolve(secret, hashed);
      if (key && failures) failures.succeeded(address);
    }
    if (!key) {
      refused.inc({ reason: 'unknown' });
      return next(unknownKey());
    }
    const shop = req.get('x-shop-id')?.trim() ?? '';
    if (!isUuid(shop)) {
      return next(new ApiError('invalid_shop', 'Send the shop as the X-Shop-Id header, a uuid.', { 'x-shop-id': shop ? 'Must be a uuid.' : 'Required.' }));
    }
    const shopId = shop.toLowerCase();
    if (!key.shops.has(shopId)) return next(new ApiError('forbidden', 'This API key is not granted that shop.', { 'x-shop-id': 'Not granted to this key.' }));
    req.shopId = shopId;
    req.apiKeyId = key.id;
    // req.log binds shop_id and api_key_id from these when it is next asked for (see requestContext).
    next();
  };
}
