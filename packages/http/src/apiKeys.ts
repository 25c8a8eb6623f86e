import { hash, randomBytes, randomUUID } from 'node:crypto';
import { isUuid } from '@shopstream/contracts';
import { isDatabaseUnavailable, queryRows, sql, type Db, type Row } from '@shopstream/db';
import type { FailedAuthLimiter } from './authFailures.js';

export interface ApiKeyInfo {
  id: string;
  name: string;
  shops: string[];
  created_at: string;
  revoked_at: string | null;
}

export interface ResolvedKey {
  id: string;
  shops: ReadonlySet<string>;
}

const iso = (d: unknown) => new Date(d as Date | string).toISOString();
/** A row of api_keys with its shops, as `list` selects it. */
const apiKeyRow = (r: Row): ApiKeyInfo => ({
  id: String(r.id),
  name: String(r.name),
  shops: r.shops as string[],
  created_at: iso(r.created_at),
  revoked_at: r.revoked_at ? iso(r.revoked_at) : null,
});

/**
 * The SHA-256 of a secret, as hex: node:crypto's one-shot `hash`, about a sixth of what a Hash object costs for a
 * key's 47 characters (each request hashes its key).
 */
const hexHashOf = (secret: string): string => hash('sha256', secret, 'hex');
const hashOf = (secret: string): Buffer => Buffer.from(hexHashOf(secret), 'hex');

/** A new secret: 32 random bytes, with a prefix that secret scanners and people recognise. */
export const newSecret = (): string => `ssk_${randomBytes(32).toString('base64url')}`;

/** What newSecret makes: `ssk_` and 43 base64url characters (32 bytes, unpadded). */
const SECRET_SHAPE = /^ssk_[A-Za-z0-9_-]{43}$/;

/** API keys, stored as SHA-256 hashes of their secrets. */
export class ApiKeyStore {
  private cache = new Map<string, { until: number; key: ResolvedKey }>();
  /** Secrets that matched no live key, by hash, with when that answer expires; insertion order is age. */
  private unknown = new Map<string, number>();
  /**
   * Hashes of secrets made here that are not of newSecret's shape: BOOTSTRAP_API_KEYS may name any secret
   * (`dev-key-change-me`), and is made to exist at every start of every process, so each process knows its own.
   */
  private otherShapes = new Set<string>();
  /**
   * The budget of failed look-ups per client address (see requireAuth), set once by the process that serves
   * HTTP; kept here so every path that authenticates (express's and a service's shed handler) shares it.
   */
  failures: FailedAuthLimiter | undefined = undefined;
  /** Look-ups under way, by hash: concurrent requests with one secret share one query. */
  private inflight = new Map<string, Promise<ResolvedKey | null>>();

  constructor(
    private readonly db: Db,
    /** How long a look-up is trusted: a revoked key stops working within this time. */
    private readonly ttlMs = 5_000,
  ) {}

  async create(shops: string[], name = '', secret = newSecret()): Promise<{ id: string; secret: string }> {
    if (shops.length === 0) throw new Error('An API key needs at least one shop.');
    const hash = hashOf(secret);
    const id = await this.db.tx(async (tx) => {
      const inserted = await tx.query(sql`
        INSERT INTO api_keys (id, name, secret_hash) VALUES (${randomUUID()}, ${name}, ${hash})
        ON CONFLICT (secret_hash) DO UPDATE SET secret_hash = EXCLUDED.secret_hash
        RETURNING id`);
      // The no-op update only returns the existing key's id: a key that was revoked stays revoked, even
      // when BOOTSTRAP_API_KEYS names it again at every start.
      const keyId = String(inserted[0].id);
      for (const shop of shops) {
        await tx.query(sql`INSERT INTO api_key_shops (api_key_id, shop_id) VALUES (${keyId}, ${shop}) ON CONFLICT DO NOTHING`);
      }
      return keyId;
    });
    this.cache.delete(hash.toString('hex'));
    this.unknown.delete(hash.toString('hex'));
    if (!SECRET_SHAPE.test(secret)) this.otherShapes.add(hash.toString('hex'));
    return { id, secret };
  }

  async list(): Promise<ApiKeyInfo[]> {
    return queryRows(
      this.db,
      sql`
      SELECT k.id, k.name, k.created_at, k.revoked_at,
             coalesce(array_agg(s.shop_id::text ORDER BY s.shop_id) FILTER (WHERE s.shop_id IS NOT NULL), '{}') AS shops
      FROM api_keys k LEFT JOIN api_key_shops s ON s.api_key_id = k.id
      GROUP BY k.id ORDER BY k.created_at, k.id`,
      apiKeyRow,
    );
  }

  /** True when a key with this id existed and was not yet revoked. */
  async revoke(id: string): Promise<boolean> {
    const rows = await this.db.query(sql`UPDATE api_keys SET revoked_at = now() WHERE id = ${id} AND revoked_at IS NULL RETURNING id`);
    return rows.length > 0;
  }

  /**
   * The key for this secret from the cache alone, without a query: the key, null when the secret is known to
   * be no key (not of a key's shape, or cached as unknown), undefined when the cache does not know (then ask
   * `resolve`). For a path that must not wait.
   */
  cached(secret: string, cacheKey = this.hashed(secret)): ResolvedKey | null | undefined {
    if (cacheKey === null) return null;
    const now = Date.now();
    const known = this.cache.get(cacheKey);
    if (known && known.until > now) return known.key;
    const unknown = this.unknown.get(cacheKey);
    return unknown !== undefined && unknown > now ? null : undefined;
  }

  /**
   * True when this secret was a live key at its last look-up here, even if that answer has expired: its
   * refresh is a query a valid caller needs, which a limit on failed look-ups must not refuse.
   */
  wasKnown(secret: string, cacheKey = this.hashed(secret)): boolean {
    return cacheKey !== null && this.cache.has(cacheKey);
  }

  /**
   * The key for this secret with its shops, or null when it is unknown or revoked. A secret not of a key's shape
   * is null at once, without a query. Cached for ttlMs: known keys and unknown secrets in two maps, so a flood of
   * bogus secrets evicts only other bogus secrets (oldest first) and never the keys in use; concurrent look-ups
   * of one secret share one query. While the database is unavailable, a known key whose entry expired is served
   * from the cache (a revocation then takes effect once the database answers again), so producers keep going
   * through an outage; an unknown secret is then a 503, as anything else needing the database.
   */
  async resolve(secret: string, cacheKey = this.hashed(secret)): Promise<ResolvedKey | null> {
    if (cacheKey === null) return null;
    const now = Date.now();
    const known = this.cache.get(cacheKey);
    if (known && known.until > now) return known.key;
    const unknown = this.unknown.get(cacheKey);
    if (unknown !== undefined && unknown > now) return null;
    const running = this.inflight.get(cacheKey);
    if (running) return running;
    const lookUp = this.lookUp(cacheKey).finally(() => this.inflight.delete(cacheKey));
    this.inflight.set(cacheKey, lookUp);
    return lookUp;
  }

  /**
   * The hash of a secret, as hex, or null when the secret cannot be a key here (no query needed to say so): what
   * `cached`, `wasKnown` and `resolve` take, so that a caller asking several of them about a secret hashes it once.
   */
  hashed(secret: string): string | null {
    // The length first: a 16 KiB header is not worth hashing to learn it is no key.
    if (secret.length > MAX_SECRET_LENGTH) return null;
    const hash = hexHashOf(secret);
    return SECRET_SHAPE.test(secret) || this.otherShapes.has(hash) ? hash : null;
  }

  private async lookUp(cacheKey: string): Promise<ResolvedKey | null> {
    const hash = Buffer.from(cacheKey, 'hex');
    const known = this.cache.get(cacheKey);
    let rows: { id: string; shopId: string | null }[];
    try {
      rows = await queryRows(
        this.db,
        sql`
        SELECT k.id, s.shop_id FROM api_keys k LEFT JOIN api_key_shops s ON s.api_key_id = k.id
        WHERE k.secret_hash = ${hash} AND k.revoked_at IS NULL`,
        (r) => ({ id: String(r.id), shopId: r.shop_id === null ? null : String(r.shop_id) }),
      );
    } catch (e) {
      if (known && isDatabaseUnavailable(e)) return known.key;
      throw e;
    }
    // Taken after the query: an answer is trusted for ttlMs from when it was known.
    const now = Date.now();
    if (rows.length === 0) {
      this.cache.delete(cacheKey);
      this.unknown.delete(cacheKey);
      if (this.unknown.size >= MAX_UNKNOWN) this.unknown.delete(this.unknown.keys().next().value!);
      this.unknown.set(cacheKey, now + this.ttlMs);
      return null;
    }
    const key = { id: rows[0].id, shops: new Set(rows.flatMap((r) => (r.shopId ? [r.shopId] : []))) };
    // Full: the oldest entry goes (it was dropped wholesale, so every key in use cost a query at once).
    if (this.cache.size >= MAX_KNOWN && !this.cache.has(cacheKey)) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(cacheKey, { until: now + this.ttlMs, key });
    return key;
  }
}

/** Far above any key's length (newSecret's are 47 characters; a bootstrap secret is whatever ops chose). */
const MAX_SECRET_LENGTH = 512;
const MAX_KNOWN = 10_000;
const MAX_UNKNOWN = 10_000;

/**
 * Parses BOOTSTRAP_API_KEYS: `<key>=<shop>[,<shop>...][;<key>=<shop>...]`.
 * Throws with a message naming the bad part.
 */
export function parseBootstrapKeys(value: string): { secret: string; shops: string[] }[] {
  return value
    .split(';')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry, i) => {
      const eq = entry.lastIndexOf('=');
      // Named by position: an excerpt of a malformed entry could be the whole secret.
      if (eq <= 0) throw new Error(`BOOTSTRAP_API_KEYS: entry ${i + 1} is not <key>=<shop>[,<shop>...]`);
      const secret = entry.slice(0, eq).trim();
      const shops = entry
        .slice(eq + 1)
        .split(',')
        .map((s) => s.trim().toLowerCase())
        .filter(Boolean);
      const bad = shops.find((s) => !isUuid(s));
      if (shops.length === 0 || bad !== undefined) throw new Error(`BOOTSTRAP_API_KEYS: shop "${bad ?? ''}" is not a uuid`);
      return { secret, shops };
    });
}

/** Makes the BOOTSTRAP_API_KEYS keys exist (idempotent: a service may start many times). */
export async function bootstrapApiKeys(store: ApiKeyStore, value: string | undefined): Promise<number> {
  if (!value) return 0;
  const keys = parseBootstrapKeys(value);
  for (const k of keys) await store.create(k.shops, 'bootstrap', k.secret);
  return keys.length;
}
