import type { RequestHandler } from 'express';
import { isUuid } from '@shopstream/contracts';
import { ApiError } from './errors.js';
import type { ApiKeyStore } from './apiKeys.js';

const BEARER = /^Bearer\s+(\S+)\s*$/i;

/** The secret of an `Authorization: Bearer <key>` header, or undefined when it is missing or malformed. */
export const bearerSecret = (header: string | undefined): string | undefined => BEARER.exec(header ?? '')?.[1];

/**
 * `Authorization: Bearer <key>` (401 when missing, unknown or revoked), then `X-Shop-Id` (400
 * `invalid_shop` when missing or not a uuid), then the grant (403 when the key does not reach that shop).
 */
export function requireAuth(keys: ApiKeyStore): RequestHandler {
  return async (req, _res, next) => {
    const secret = bearerSecret(req.get('authorization'));
    if (secret === undefined)
      return next(new ApiError('unauthorized', 'Send your API key as Authorization: Bearer <key>.', { authorization: 'Missing or malformed.' }));
    const key = await keys.resolve(secret);
    if (!key) return next(new ApiError('unauthorized', 'The API key is unknown or revoked.', { authorization: 'Unknown or revoked key.' }));
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
