import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';

/** The TLS parameters of a PostgreSQL URL, as libpq names them; removed from the URL given to the drivers. */
const TLS_PARAMS = ['sslmode', 'sslrootcert', 'sslcert', 'sslkey', 'uselibpqcompat'];

/** A DATABASE_URL's connection, TLS settings taken out (see postgresTls). */
export interface PostgresConnection {
  /** The URL without its TLS parameters. */
  url: string;
  /** TLS as node:tls takes it; false: none; undefined: the URL says nothing (each driver's default, unchanged). */
  ssl: ConnectionOptions | false | undefined;
}

/**
 * DATABASE_URL's sslmode, sslrootcert, sslcert and sslkey read as libpq does, for every connection Shopstream makes
 * (the pool, LISTEN, the breaker's probe): @databases/pg and pg each read them differently, and neither as libpq.
 * @databases/pg 6.1 skips verification under `verify-full` when no sslrootcert is given; pg 8 verifies under
 * `require` (and warns). Here:
 * - disable: plaintext;
 * - require: TLS, the certificate not checked, unless sslrootcert is given: then checked against it (verify-ca);
 * - verify-ca: checked against sslrootcert, the host name not; verify-full: checked against sslrootcert, else the
 *   system's CAs, and the host name too;
 * - allow, prefer: TLS without checks where the server offers it (@databases/pg's fallback; pg: TLS required).
 * sslcert and sslkey give a client certificate. A file that cannot be read, or an sslmode libpq does not have, throws.
 */
export function postgresTls(databaseUrl: string): PostgresConnection {
  let u: URL;
  try {
    u = new URL(databaseUrl);
  } catch {
    return { url: databaseUrl, ssl: undefined };
  }
  const p = u.searchParams;
  if (!TLS_PARAMS.some((k) => p.has(k))) return { url: databaseUrl, ssl: undefined };
  const mode = p.get('sslmode') ?? 'prefer';
  const read = (name: string) => {
    const file = p.get(name);
    if (file === null) return undefined;
    try {
      return readFileSync(file, 'utf8');
    } catch (e) {
      throw new Error(`DATABASE_URL's ${name}=${file} cannot be read: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    }
  };
  const [ca, cert, key] = mode === 'disable' ? [] : [read('sslrootcert'), read('sslcert'), read('sslkey')];
  for (const k of TLS_PARAMS) p.delete(k);
  const url = u.toString();
  if (mode === 'disable') return { url, ssl: false };
  const files: ConnectionOptions = { ...(ca !== undefined ? { ca } : {}), ...(cert !== undefined ? { cert } : {}), ...(key !== undefined ? { key } : {}) };
  const anyHost = { checkServerIdentity: () => undefined };
  switch (mode) {
    case 'allow':
    case 'prefer':
      return { url, ssl: { ...files, rejectUnauthorized: false } };
    case 'require':
      return { url, ssl: ca !== undefined ? { ...files, ...anyHost } : { ...files, rejectUnauthorized: false } };
    case 'verify-ca':
      if (ca === undefined) throw new Error("DATABASE_URL's sslmode=verify-ca needs sslrootcert (the CA to check the server's certificate against)");
      return { url, ssl: { ...files, ...anyHost } };
    case 'verify-full':
      return { url, ssl: files };
    default:
      throw new Error(`DATABASE_URL's sslmode=${mode} is not one of disable, allow, prefer, require, verify-ca, verify-full`);
  }
}
