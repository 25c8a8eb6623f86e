import { describe, expect, it } from 'vitest';
import { topicLimits } from '@shopstream/contracts';
import { recordBytes, splitForSend } from './sendSize.js';

const rec = (n: number, bytes: number) => ({ key: 'shop', value: 'x'.repeat(bytes), headers: { n: String(n) } });

describe('splitForSend', () => {
  it('keeps a publish that fits the topic limit in one send, whatever the send budget', () => {
    const records = [rec(1, 3_000), rec(2, 3_000), rec(3, 3_000)];
    const sends = splitForSend(records, { maxMessageBytes: 10_000, sendBudgetBytes: 1_000 });
    expect(sends).toEqual([{ records, bytes: records.reduce((n, r) => n + recordBytes(r), 0) }]);
  });

  it('splits a larger publish into sends of at most the budget, in order', () => {
    const records = [1, 2, 3, 4, 5].map((n) => rec(n, 400));
    const size = recordBytes(records[0]);
    const sends = splitForSend(records, { maxMessageBytes: 4 * size - 1, sendBudgetBytes: 2 * size });
    expect(sends.map((s) => s.records.map((r) => r.headers?.n))).toEqual([['1', '2'], ['3', '4'], ['5']]);
    expect(sends.map((s) => s.bytes)).toEqual([2 * size, 2 * size, size]);
  });

  it('sends a single record above the budget alone', () => {
    const sends = splitForSend([rec(1, 10), rec(2, 5_000), rec(3, 10)], { maxMessageBytes: 1_000, sendBudgetBytes: 500 });
    expect(sends.map((s) => s.records.map((r) => r.headers?.n))).toEqual([['1'], ['2'], ['3']]);
  });

  it("uses one budget below the topics' limit by default", () => {
    expect(topicLimits.sendBudgetBytes).toBeLessThan(topicLimits.maxMessageBytes);
    expect(splitForSend([rec(1, 100)])).toHaveLength(1);
  });
});
