import path from 'node:path';
import { writeFile } from 'node:fs/promises';
import { findExecutable, runCommand } from './proc.js';

/** PEM files made by makeTestCertificates. */
export interface TestCertificates {
  /** The CA that signed the server's and the client's certificates. */
  caFile: string;
  /** A CA that signed nothing here: a client trusting only it must refuse the server. */
  otherCaFile: string;
  /** The server's certificate (CN localhost; subjectAltName 127.0.0.1 and localhost) and its unencrypted PKCS#8 key. */
  serverCertFile: string;
  serverKeyFile: string;
  /** A client certificate (CN shopstream), for mutual TLS, and its key. */
  clientCertFile: string;
  clientKeyFile: string;
}

async function openssl(args: string[], cwd: string): Promise<void> {
  const bin = findExecutable('openssl');
  if (!bin) throw new Error('no openssl on PATH: it makes the certificates of the TLS tests');
  const { code, output } = await runCommand(bin, args, { cwd, timeoutMs: 30_000 });
  if (code !== 0) throw new Error(`openssl ${args[0]} failed (exit ${code}): ${output.trim()}`);
}

/** Two CAs made now with openssl (the second signs nothing), and a server's and a client's certificates signed by the first, in dir. */
export async function makeTestCertificates(dir: string): Promise<TestCertificates> {
  const days = ['-days', '2'];
  for (const [name, cn] of [
    ['ca', 'shopstream test CA'],
    ['other-ca', 'another CA'],
  ]) {
    await openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.pem`, ...days, '-subj', `/CN=${cn}`], dir);
  }
  for (const [name, cn, ext] of [
    ['server', 'localhost', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth'],
    ['client', 'shopstream', 'extendedKeyUsage=clientAuth'],
  ]) {
    await writeFile(path.join(dir, `${name}.ext`), `${ext}\n`);
    await openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${cn}`], dir);
    await openssl(
      ['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${name}.pem`, ...days, '-extfile', `${name}.ext`],
      dir,
    );
  }
  const at = (f: string) => path.join(dir, f);
  return {
    caFile: at('ca.pem'),
    otherCaFile: at('other-ca.pem'),
    serverCertFile: at('server.pem'),
    serverKeyFile: at('server.key'),
    clientCertFile: at('client.pem'),
    clientKeyFile: at('client.key'),
  };
}
