import { describe, expect, it } from 'vitest';
import { newKey, newKeyBytes, open, seal, secretKey } from './aead.js';
import { fingerprint, parseKeyList, parseMasterKey } from './keyring.js';

describe('seal and open (AES-256-GCM)', () => {
  it('opens what it sealed, with a fresh 96-bit nonce each time', () => {
    const key = newKey();
    const a = seal(key, 'ada@example.com', 'shop/activity/contact');
    const b = seal(key, 'ada@example.com', 'shop/activity/contact');
    expect(Buffer.from(a.iv, 'base64')).toHaveLength(12);
    expect(a.iv).not.toBe(b.iv);
    expect(a.data).not.toBe(b.data);
    expect(a.data).not.toContain('ada');
    expect(open(key, a, 'shop/activity/contact').toString()).toBe('ada@example.com');
  });

  it('refuses another key, other additional data, and altered bytes', () => {
    const key = newKey();
    const s = seal(key, 'secret', 'x');
    expect(() => open(newKey(), s, 'x')).toThrow();
    expect(() => open(key, s, 'y')).toThrow();
    const bytes = Buffer.from(s.data, 'base64');
    bytes[0] ^= 1;
    expect(() => open(key, { iv: s.iv, data: bytes.toString('base64') }, 'x')).toThrow();
  });
});

describe('keys', () => {
  it('are KeyObjects made once from their bytes: a key and one made again from the same bytes seal and open alike', () => {
    const [bytes] = newKeyBytes(1);
    expect(bytes).toHaveLength(32);
    const s = seal(secretKey(bytes), 'ada@example.com', 'x');
    expect(open(secretKey(Buffer.from(bytes)), s, 'x').toString()).toBe('ada@example.com');
    const [a, b] = newKeyBytes(2);
    expect(a.equals(b)).toBe(false);
  });
});

describe('master keys', () => {
  it('reads base64 or hex keys of 32 bytes, a list with comments, the first current; refuses other lengths', () => {
    const [k] = newKeyBytes(1);
    expect(parseMasterKey(k.toString('base64'), 'env').equals(k)).toBe(true);
    expect(parseMasterKey(k.toString('hex'), 'env').equals(k)).toBe(true);
    const [other] = newKeyBytes(1);
    const list = parseKeyList(`# current\n${k.toString('base64')}\n\n${other.toString('hex')} # old\n`, 'file');
    expect(list.map(fingerprint)).toEqual([fingerprint(k), fingerprint(other)]);
    expect(parseKeyList(`${k.toString('base64')},${other.toString('base64')}`, 'env')).toHaveLength(2);
    expect(() => parseMasterKey('c2hvcnQ=', 'env')).toThrow(/32 bytes/);
    expect(fingerprint(k)).toMatch(/^[0-9a-f]{16}$/);
  });
});
