import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { queryRows, sql, type Queryable } from '@shopstream/db';
import { KEY_BYTES, newKeyBytes, open, seal, secretKey } from './aead.js';

/** The settings a keyring is read from: PRIVACY_MASTER_KEY and PRIVACY_MASTER_KEY_FILE (a service's env). */
export interface MasterKeySettings {
  PRIVACY_MASTER_KEY?: string;
  PRIVACY_MASTER_KEY_FILE?: string;
}

/** What the keyring is opened from: the settings, and the database (the keys' store when none is configured). */
export interface KeyringSource {
  env: MasterKeySettings;
  db: Queryable;
  logger: { warn(obj: object, msg: string): void };
}

export class UnknownMasterKeyError extends Error {}

/**
 * The master keys: the first wraps new data keys, every one unwraps (so a rotation is: put the new key first,
 * run `pnpm cli privacy rotate-master-key`, then drop the old one). A key is named by its fingerprint, the first
 * 16 hex digits of its SHA-256, which wrapped keys record.
 */
export interface Keyring {
  readonly currentId: string;
  /** Whether the current key is the one kept in the database (none configured). */
  readonly fromDatabase: boolean;
  readonly ids: readonly string[];
  /** Wraps a data key (or any secret) under the current master key, bound to `aad`. */
  wrap(secret: Buffer, aad: string): { masterId: string; wrapped: string };
  /** Whether a key of the ring has this fingerprint. */
  knows(masterId: string): boolean;
  /** Unwraps what wrap made; UnknownMasterKeyError when no key of the ring has that fingerprint. */
  unwrap(masterId: string, wrapped: string, aad: string): Buffer;
  /** Reads the keys again (a file or the database may have gained one: a rotation run by the CLI). */
  reload(): Promise<void>;
}

export const fingerprint = (key: Buffer): string => createHash('sha256').update(key).digest('hex').slice(0, 16);

/** A master key as configured: base64 of 32 bytes, or 64 hex digits. */
export function parseMasterKey(text: string, where: string): Buffer {
  const t = text.trim();
  const key = /^[0-9a-fA-F]{64}$/.test(t) ? Buffer.from(t, 'hex') : Buffer.from(t, 'base64');
  if (key.length !== KEY_BYTES) throw new Error(`${where}: a master key is 32 bytes, as base64 (44 characters) or 64 hex digits`);
  return key;
}

/** The keys of a key file or of PRIVACY_MASTER_KEY: one per line or comma, `#` comments, the first current. */
export const parseKeyList = (text: string, where: string): Buffer[] =>
  text
    .split(/[\n,]/)
    .map((l) => l.replace(/#.*/, '').trim())
    .filter(Boolean)
    .map((l, i) => parseMasterKey(l, `${where} (key ${i + 1})`));

/** A new master key as written to a key file: base64. */
export const newMasterKeyText = (): string => newKeyBytes(1)[0].toString('base64');

/**
 * Where the master keys come from: PRIVACY_MASTER_KEY, else PRIVACY_MASTER_KEY_FILE (both: a list, the first
 * current); with neither, a key made on first start and kept in the database (table privacy_master_keys), which
 * every process of the deployment reaches alike (the embedded mode's database lives in DATA_DIR). Keys in that
 * table are kept as old keys beside configured ones, so configuring a key later is a rotation like any other.
 */
async function loadKeys(src: KeyringSource): Promise<{ keys: Buffer[]; from: string }> {
  const configured = src.env.PRIVACY_MASTER_KEY?.trim()
    ? { keys: parseKeyList(src.env.PRIVACY_MASTER_KEY, 'PRIVACY_MASTER_KEY'), from: 'PRIVACY_MASTER_KEY' }
    : src.env.PRIVACY_MASTER_KEY_FILE?.trim()
      ? { keys: parseKeyList(await readFile(src.env.PRIVACY_MASTER_KEY_FILE, 'utf8'), src.env.PRIVACY_MASTER_KEY_FILE), from: src.env.PRIVACY_MASTER_KEY_FILE }
      : null;
  if (configured) {
    if (configured.keys.length === 0) throw new Error(`${configured.from}: no master key in it`);
    return { keys: [...configured.keys, ...(await storedKeys(src.db))], from: configured.from };
  }
  return { keys: await databaseKeys(src.db), from: STORED };
}

const STORED = 'the database (table privacy_master_keys)';

const storedKeys = (db: Queryable) =>
  queryRows(db, sql`SELECT key FROM privacy_master_keys ORDER BY seq`, (r) => parseMasterKey(String(r.key), 'privacy_master_keys'));

async function databaseKeys(db: Queryable): Promise<Buffer[]> {
  let keys = await storedKeys(db);
  if (keys.length === 0) {
    // Processes starting at once may each insert one (the statement's snapshot predates the lock it waits for):
    // then the oldest is every process's current key, and the others only ever unwrap nothing.
    await db.query(sql`
      INSERT INTO privacy_master_keys (key) SELECT ${newMasterKeyText()}
      FROM (SELECT pg_advisory_xact_lock(74203)) l WHERE NOT EXISTS (SELECT 1 FROM privacy_master_keys)`);
    keys = await storedKeys(db);
  }
  return keys;
}

/** Opens the master keyring (see loadKeys for where it comes from); `warn`: say so when the database holds it. */
export async function openKeyring(src: KeyringSource, opts: { warn?: boolean } = {}): Promise<Keyring> {
  const loaded = await loadKeys(src);
  if (loaded.from === STORED && opts.warn) {
    src.logger.warn(
      { from: loaded.from },
      'privacy: no PRIVACY_MASTER_KEY or PRIVACY_MASTER_KEY_FILE; the master key is kept in the database beside the keys it wraps, so a backup of the database can bring back erased data. Set one in production (docs/privacy.md)',
    );
  }
  return ringOver(loaded, () => loadKeys(src));
}

/** A keyring over fixed keys, the first current (no database; reload changes nothing): for tests and micro-benchmarks. */
export const keyringOf = (keys: Buffer[]): Keyring => {
  const fixed = { keys, from: 'the keys given' };
  return ringOver(fixed, async () => fixed);
};

function ringOver(first: { keys: Buffer[]; from: string }, load: () => Promise<{ keys: Buffer[]; from: string }>): Keyring {
  let loaded = first;
  // Each key as a KeyObject, made once per load (aead.ts: a Buffer key costs 30-40 µs per call on Node 24).
  let byId = new Map(loaded.keys.map((k) => [fingerprint(k), secretKey(k)]));
  // The current key's fingerprint, computed once per load (a SHA-256 per wrapped key cost as much as the wrap).
  let currentId = fingerprint(loaded.keys[0]);
  let current = byId.get(currentId)!;
  return {
    get fromDatabase() {
      return loaded.from === STORED;
    },
    get currentId() {
      return currentId;
    },
    get ids() {
      return [...byId.keys()];
    },
    wrap(secret, aad) {
      const s = seal(current, secret, aad);
      return { masterId: currentId, wrapped: `${s.iv}.${s.data}` };
    },
    knows: (masterId) => byId.has(masterId),
    unwrap(masterId, wrapped, aad) {
      const key = byId.get(masterId);
      if (!key) throw new UnknownMasterKeyError(`no master key with fingerprint ${masterId} is configured (${loaded.from})`);
      const [iv, data] = wrapped.split('.');
      return open(key, { iv, data }, aad);
    },
    async reload() {
      loaded = await load();
      byId = new Map(loaded.keys.map((k) => [fingerprint(k), secretKey(k)]));
      currentId = fingerprint(loaded.keys[0]);
      current = byId.get(currentId)!;
    },
  };
}
