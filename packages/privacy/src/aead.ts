import { createCipheriv, createDecipheriv, createSecretKey, randomBytes, type KeyObject } from 'node:crypto';

/** AES-256-GCM as node:crypto gives it: a random 96-bit nonce per value, the 128-bit tag after the ciphertext. */
const ALG = 'aes-256-gcm';
const IV_BYTES = 12;
const TAG_BYTES = 16;
export const KEY_BYTES = 32;

/**
 * Keys are held as KeyObjects, made once per key, never as Buffers handed to each cipher call: on Node 24.x (from a
 * release between 24.10.0 and 24.18.0 to 24.21.0 at least) node:crypto checks a Buffer key against KeyObject and
 * CryptoKey by a path that costs 30-40 µs per createCipheriv / createDecipheriv, 5-7 times the AES-GCM call itself;
 * a KeyObject takes the fast path on every Node (20, 22, 24, 25, 26 measured: bench/README.md, "Sealing off and on").
 */
export type SecretKey = KeyObject;

/** A key's bytes as the cipher calls take them. */
export const secretKey = (bytes: Buffer): SecretKey => createSecretKey(bytes);

export interface Sealed {
  /** The nonce, base64. */
  iv: string;
  /** The ciphertext followed by the tag, base64. */
  data: string;
}

/**
 * Nonces come from the CSPRNG a pool at a time (as node's randomUUID does): one randomBytes call costs about as
 * much as the encryption of a small value, and every event with a contact takes one. Each nonce is still 96
 * fresh random bits, used once.
 */
const POOL_NONCES = 1024;
let pool = Buffer.alloc(0);
let at = 0;
function nonce(): Buffer {
  if (at + IV_BYTES > pool.length) {
    pool = randomBytes(IV_BYTES * POOL_NONCES);
    at = 0;
  }
  const iv = pool.subarray(at, at + IV_BYTES);
  at += IV_BYTES;
  return iv;
}

/** Encrypts `plaintext` under `key`, bound to `aad` (a value moved to another record does not open there). */
export function seal(key: SecretKey, plaintext: Buffer | string, aad: string): Sealed {
  const iv = nonce();
  const cipher = createCipheriv(ALG, key, iv, { authTagLength: TAG_BYTES });
  cipher.setAAD(Buffer.from(aad, 'utf8'));
  const body = cipher.update(plaintext);
  // GCM's final adds no bytes: it computes the tag.
  cipher.final();
  const out = Buffer.concat([body, cipher.getAuthTag()], body.length + TAG_BYTES);
  return { iv: iv.toString('base64'), data: out.toString('base64') };
}

/** Decrypts what `seal` made with the same key and aad; throws when the key, the aad or the bytes differ. */
export function open(key: SecretKey, sealed: Sealed, aad: string): Buffer {
  const iv = Buffer.from(sealed.iv, 'base64');
  const all = Buffer.from(sealed.data, 'base64');
  if (iv.length !== IV_BYTES || all.length < TAG_BYTES) throw new Error('sealed value of the wrong shape');
  const decipher = createDecipheriv(ALG, key, iv, { authTagLength: TAG_BYTES });
  decipher.setAAD(Buffer.from(aad, 'utf8'));
  decipher.setAuthTag(all.subarray(all.length - TAG_BYTES));
  const body = decipher.update(all.subarray(0, all.length - TAG_BYTES));
  // Throws when the tag does not match: then nothing of `body` is returned.
  decipher.final();
  return body;
}

/** A new random key. */
export const newKey = (): SecretKey => createSecretKey(randomBytes(KEY_BYTES));

/**
 * The bytes of `n` new random keys, from one call to the CSPRNG (a bulk request may meet hundreds of new contacts):
 * bytes, not keys, because a data key is wrapped (encrypted) as bytes before it is used.
 */
export function newKeyBytes(n: number): Buffer[] {
  const all = randomBytes(KEY_BYTES * n);
  return Array.from({ length: n }, (_, i) => all.subarray(i * KEY_BYTES, (i + 1) * KEY_BYTES));
}
