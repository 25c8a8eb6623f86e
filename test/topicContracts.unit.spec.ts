import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { compatibilityBreaks, contractJsonSchema, metricEventSchema, topicContracts, type JsonSchema } from '@shopstream/contracts';
import { z } from 'zod';

/**
 * The topics' checked-in JSON Schema files (one per record schema, named by the `schema` header value) against
 * the zod contracts they are generated from, and the check that a change takes nothing away from a version's
 * consumers. Files and contracts only: test/topicContracts.spec.ts reads records back from a broker.
 */
const repo = path.resolve(import.meta.dirname, '..');
const schemaFile = (name: string) => path.join(repo, 'packages/contracts/schemas', `${name}.json`);
const checkedIn = (name: string) => JSON.parse(readFileSync(schemaFile(name), 'utf8')) as Record<string, any>;

describe('schema files', () => {
  it('are what the zod contracts generate (run `pnpm schemas` after changing a contract)', () => {
    for (const name of Object.keys(topicContracts)) {
      expect(readFileSync(schemaFile(name), 'utf8'), `packages/contracts/schemas/${name}.json is stale: run \`pnpm schemas\``).toBe(
        `${JSON.stringify(contractJsonSchema(name), null, 2)}\n`,
      );
    }
  });

  it('compatibility check: a field removed, renamed, made optional or narrowed breaks a version; an added field does not', () => {
    const base = checkedIn('metric-event.v1');
    const variant = (schema: z.ZodType) => z.toJSONSchema(schema, { target: 'draft-2020-12', io: 'input', unrepresentable: 'any' }) as Record<string, any>;
    expect(compatibilityBreaks(base, base)).toEqual([]);
    expect(compatibilityBreaks(base, variant(metricEventSchema.extend({ channel: z.string().optional() })))).toEqual([]);
    expect(compatibilityBreaks(base, variant(metricEventSchema.omit({ deduping_key: true })))).toEqual(['$.deduping_key: removed']);
    const renamed = compatibilityBreaks(base, variant(metricEventSchema.omit({ recorded_at: true }).extend({ recordedAt: z.string() })));
    expect(renamed).toContain('$.recorded_at: removed');
    expect(compatibilityBreaks(base, variant(metricEventSchema.partial({ name: true })))).toEqual(['$.name: no longer required']);
    expect(compatibilityBreaks(base, variant(metricEventSchema.extend({ value: z.number() })))).toEqual([
      '$.value: type narrowed from number|null|integer to number|integer',
    ]);
    expect(compatibilityBreaks(base, variant(metricEventSchema.extend({ name: z.string().max(10) })))).toEqual(['$.name: maxLength tightened to 10']);
    expect(compatibilityBreaks(base, variant(metricEventSchema.strict()))).toEqual(['$: extra properties now forbidden']);
    const status: JsonSchema = { type: 'object', properties: { status: { type: 'string', enum: ['active', 'paused'] } }, required: ['status'] };
    expect(compatibilityBreaks(status, { ...status, properties: { status: { type: 'string', enum: ['active'] } } })).toEqual(['$.status: enum narrowed']);
    expect(compatibilityBreaks(status, { ...status, properties: { status: { type: 'string', enum: ['active', 'paused', 'archived'] } } })).toEqual([]);
  });
});
