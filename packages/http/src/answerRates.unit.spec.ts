import { expect, it } from 'vitest';
import { AnswerRates } from './answerRates.js';

it('counts answers by status in slices of the clock it is given, oldest first, the empty ones included', () => {
  let now = Date.parse('2026-11-26T10:00:05Z');
  const rates = new AnswerRates(10_000, 3, () => now);
  rates.record(202);
  rates.record(202);
  rates.record(503);
  now += 10_000;
  rates.record('202');
  expect(rates.snapshot()).toEqual([
    { start: '2026-11-26T09:59:50.000Z', seconds: 10, counts: {} },
    { start: '2026-11-26T10:00:00.000Z', seconds: 10, counts: { '202': 2, '503': 1 } },
    { start: '2026-11-26T10:00:10.000Z', seconds: 10, counts: { '202': 1 } },
  ]);
});

it('forgets slices older than its window, also after a silence longer than the window', () => {
  let now = Date.parse('2026-11-26T10:00:00Z');
  const rates = new AnswerRates(10_000, 3, () => now);
  for (let i = 0; i < 5; i++) {
    rates.record(200 + i);
    now += 10_000;
  }
  expect(rates.snapshot().map((b) => Object.keys(b.counts))).toEqual([['203'], ['204'], []]);
  now += 3_600_000;
  rates.record(429);
  expect(rates.snapshot().map((b) => b.counts)).toEqual([{}, {}, { '429': 1 }]);
});
