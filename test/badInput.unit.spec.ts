import { describe, expect, it } from 'vitest';
import { problemsOf } from '@shopstream/testkit/badInput';

/** The bad-input check of test/badInput.property.spec.ts, on answers made up here: it finds what it should. */
describe('the check itself', () => {
  const r = { method: 'POST', path: '/v2026-04/events/', headers: {}, operation: 'POST /v2026-04/events/', tags: [] };
  const id = '0b3f6a52-5d2e-4b43-9d0e-2f1f3f0e8a11';
  it('finds a 5xx, a failure outside the envelope, a missing request id; passes a good failure', () => {
    const good = {
      status: 400,
      headers: { 'x-request-id': id },
      body: JSON.stringify({ error: { code: 'validation_error', message: 'x', request_id: id, fields: {} } }),
    };
    expect(problemsOf(r, good)).toEqual([]);
    expect(problemsOf(r, { ...good, status: 500 }).map((p) => p.kind)).toEqual(['server_error']);
    expect(problemsOf(r, { ...good, body: '' }).map((p) => p.kind)).toEqual(['envelope']);
    expect(
      problemsOf(r, { ...good, body: JSON.stringify({ error: { code: 'x', message: 'x', request_id: 'other', fields: {} } }) }).map((p) => p.kind),
    ).toEqual(['envelope']);
    expect(problemsOf(r, { ...good, headers: {} }).map((p) => p.kind)).toEqual(['request_id', 'envelope']);
  });
});
