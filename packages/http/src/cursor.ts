import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Request } from 'express';
import type { z } from 'zod';
import { ApiError } from './errors.js';

/** Seals a JSON payload into an opaque, tamper-proof token, and opens it again. */
export interface CursorCodec<T> {
  encode(payload: T): string;
  /** The payload, or a 400 `invalid_cursor` when the token was altered, forged or is not one of ours. */
  decode(token: string): T;
}

const invalid = () =>
  new ApiError('invalid_cursor', 'The cursor is not valid: take it unchanged from a next or previous link.', { cursor: 'Invalid or altered.' });

/**
 * `base64url(json).base64url(hmac-sha256(secret, json part))`. The payload is readable by whoever holds the
 * token (it only carries what the request already said); the MAC is what makes it tamper-proof.
 */
export function cursorCodec<T>(secret: string, schema: z.ZodType<T>): CursorCodec<T> {
  const mac = (body: string) => createHmac('sha256', secret).update(body).digest();
  return {
    encode(payload) {
      const body = Buffer.from(JSON.stringify(payload), 'utf8').toString('base64url');
      return `${body}.${mac(body).toString('base64url')}`;
    },
    decode(token) {
      const dot = token.indexOf('.');
      if (dot <= 0) throw invalid();
      const body = token.slice(0, dot);
      const given = Buffer.from(token.slice(dot + 1), 'base64url');
      const want = mac(body);
      if (given.length !== want.length || !timingSafeEqual(given, want)) throw invalid();
      let json: unknown;
      try {
        json = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
      } catch {
        // A valid MAC over a body that is not JSON means another codec shares the secret: not ours.
        throw invalid();
      }
      const parsed = schema.safeParse(json);
      if (!parsed.success) throw invalid();
      return parsed.data;
    },
  };
}

/**
 * `PUBLIC_BASE_URL` when configured (without a trailing slash), else the scheme and host (with its port) of the
 * request: express takes them from X-Forwarded-Proto and X-Forwarded-Host only when `trust proxy` (TRUST_PROXY)
 * trusts the peer, from the connection and the Host header otherwise.
 */
export function baseUrlOf(req: Request, configured: string | undefined): string {
  if (configured) return configured.replace(/\/+$/, '');
  return `${req.protocol}://${req.host ?? req.get('host')}`;
}

/** An absolute link: base + path + the parameters that are set, in the order given. */
export function pageLink(base: string, path: string, params: Record<string, string | number | undefined>): string {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) qs.set(k, String(v));
  const q = qs.toString();
  return `${base}${path}${q ? `?${q}` : ''}`;
}
