import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startLocalKafkaWith } from './kafka.js';
import { freePort } from './proc.js';
import { makeTestCertificates } from './testCertificates.js';

/** How long an OAUTHBEARER session on the secure broker lasts at most: then its client re-authenticates. */
export const OAUTH_SESSION_MS = 15_000;

/**
 * A broker whose clients must speak TLS, show a client certificate and log in with SCRAM-SHA-512, or with
 * OAUTHBEARER and an unsigned JWT (startSecureKafka, unsignedJwt).
 */
export interface SecureKafkaHandle {
  /** The SASL_SSL listener, the only one clients are given. */
  brokers: string[];
  /** The SCRAM-SHA-512 user made at format time, and its password. */
  username: string;
  password: string;
  /** PEM files: the CA that signed the broker's and the client's certificates, the client's certificate and key. */
  caFile: string;
  certFile: string;
  keyFile: string;
  /** A CA that signed nothing here: a client trusting only it must refuse the broker. */
  otherCaFile: string;
  /** The env of a Shopstream process that connects to this broker (KAFKA_BROKERS, KAFKA_SSL*, KAFKA_SASL_*). */
  env: Record<string, string>;
  stop(): Promise<void>;
}

/**
 * A local Kafka broker (the machine's java, the jars testkit caches) with a SASL_SSL listener: TLS with a
 * certificate signed by a CA made now with openssl, client certificates required (mutual TLS), and SCRAM-SHA-512
 * with one user made when the storage is formatted (`kafka-storage format --add-scram`) or OAUTHBEARER (unsigned
 * JWTs: unsignedJwt; sessions ended every OAUTH_SESSION_MS). A PLAINTEXT listener is
 * there only for the broker itself and its readiness check; clients are given the SASL_SSL one. A second broker
 * beside the shared one: start it once per spec file (9 s measured on the loaded 2-core machine: openssl, a StorageTool
 * JVM, the broker JVM) and stop it after.
 */
export async function startSecureKafka(): Promise<SecureKafkaHandle> {
  const dir = await mkdtemp(path.join(tmpdir(), 'shopstream-tls-'));
  try {
    const certs = await makeTestCertificates(dir);
    // Kafka's PEM key store: the private key (PKCS#8, unencrypted, so no ssl.key.password) and its certificate.
    const keystore = path.join(dir, 'broker-keystore.pem');
    await writeFile(keystore, `${(await readFile(certs.serverKeyFile, 'utf8')).trim()}\n${(await readFile(certs.serverCertFile, 'utf8')).trim()}\n`);
    const username = 'shopstream';
    const password = `secret-${Math.random().toString(36).slice(2)}`;
    const securePort = await freePort();
    const broker = await startLocalKafkaWith({
      avoidPorts: [securePort],
      scramUsers: [`SCRAM-SHA-512=[name=${username},password=${password}]`],
      settings: ({ port, controllerPort }) => ({
        listeners: `PLAINTEXT://127.0.0.1:${port},SASL_SSL://127.0.0.1:${securePort},CONTROLLER://127.0.0.1:${controllerPort}`,
        'advertised.listeners': `PLAINTEXT://127.0.0.1:${port},SASL_SSL://127.0.0.1:${securePort}`,
        'listener.security.protocol.map': 'PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT',
        'sasl.enabled.mechanisms': 'SCRAM-SHA-512,OAUTHBEARER',
        'listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config': 'org.apache.kafka.common.security.scram.ScramLoginModule required;',
        // OAUTHBEARER with Kafka's unsecured validator (an unsigned JWT's `sub` and `exp`; signatures are a cluster's
        // own business, not the client's), and sessions that end: a client must re-authenticate with a current token.
        'listener.name.sasl_ssl.oauthbearer.sasl.jaas.config': 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;',
        'listener.name.sasl_ssl.oauthbearer.connections.max.reauth.ms': String(OAUTH_SESSION_MS),
        'listener.name.sasl_ssl.ssl.client.auth': 'required',
        'ssl.keystore.type': 'PEM',
        'ssl.keystore.location': keystore,
        'ssl.truststore.type': 'PEM',
        'ssl.truststore.location': certs.caFile,
      }),
    });
    const brokers = [`127.0.0.1:${securePort}`];
    const files = { caFile: certs.caFile, certFile: certs.clientCertFile, keyFile: certs.clientKeyFile };
    return {
      brokers,
      username,
      password,
      ...files,
      otherCaFile: certs.otherCaFile,
      env: {
        KAFKA_BROKERS: brokers.join(','),
        KAFKA_SSL: 'true',
        KAFKA_SSL_CA_FILE: files.caFile,
        KAFKA_SSL_CERT_FILE: files.certFile,
        KAFKA_SSL_KEY_FILE: files.keyFile,
        KAFKA_SASL_MECHANISM: 'scram-sha-512',
        KAFKA_SASL_USERNAME: username,
        KAFKA_SASL_PASSWORD: password,
      },
      stop: async () => {
        await broker.stop();
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}

/** A JWT as Kafka's unsecured OAUTHBEARER validator takes it: unsigned (`alg: none`), with `sub` and `exp` (seconds). */
export function unsignedJwt(claims: { sub: string; exp: number } & Record<string, unknown>): string {
  const part = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
  return `${part({ alg: 'none' })}.${part({ iat: Math.floor(Date.now() / 1000), ...claims })}.`;
}
