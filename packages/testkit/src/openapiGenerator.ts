import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { cacheRoot, log } from './proc.js';

/**
 * The openapi-generator versions clients are generated with in test/generatedClients.spec.ts: the oldest one
 * users are known to run, and the newest 7.x on Maven Central when this was written.
 */
export const OPENAPI_GENERATOR_VERSIONS = ['7.16.0', '7.25.0'] as const;

/**
 * openapi-generator-cli's jar, fetched from Maven Central once into the cache (as the Kafka jars are) and
 * reused after that. Returns its path.
 */
export async function ensureOpenApiGenerator(version: string): Promise<string> {
  const dir = path.join(cacheRoot(), 'openapi-generator');
  const jar = path.join(dir, `openapi-generator-cli-${version}.jar`);
  if (existsSync(jar)) return jar;
  mkdirSync(dir, { recursive: true });
  const url = `https://repo1.maven.org/maven2/org/openapitools/openapi-generator-cli/${version}/openapi-generator-cli-${version}.jar`;
  const t0 = Date.now();
  const res = await fetch(url);
  if (!res.ok) throw new Error(`openapi-generator-cli ${version}: ${url} answered ${res.status}`);
  // Written aside and renamed: a run killed half-way never leaves a truncated jar that later runs would trust.
  const part = `${jar}.${process.pid}.part`;
  try {
    writeFileSync(part, Buffer.from(await res.arrayBuffer()));
    renameSync(part, jar);
  } finally {
    rmSync(part, { force: true });
  }
  log(`fetched openapi-generator-cli ${version} from Maven Central in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return jar;
}
