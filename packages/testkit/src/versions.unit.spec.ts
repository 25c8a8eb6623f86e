import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { uniquePrefix } from './index.js';
import { KAFKA_IMAGE, KAFKA_VERSION } from './versions.js';

describe('versions', () => {
  it('the pom fetches the same Kafka version the code and the image use', () => {
    const pom = readFileSync(new URL('../kafka/pom.xml', import.meta.url), 'utf8');
    expect(pom.match(/<kafka\.version>([^<]+)<\/kafka\.version>/)?.[1]).toBe(KAFKA_VERSION);
    expect(KAFKA_IMAGE.endsWith(`:${KAFKA_VERSION}`)).toBe(true);
  });

  it('uniquePrefix gives a different topic prefix each time', () => {
    const a = uniquePrefix();
    expect(a).toMatch(/^t[0-9a-f]{8}\.$/);
    expect(uniquePrefix()).not.toBe(a);
  });
});
