import { describe, expect, it } from 'vitest';
import { etaSeconds, partitionLag, recordsBefore, recordsBehind, recordsHeld, totalLag } from './offsetMath.js';

describe('recordsBefore', () => {
  it('counts the records from a position to the log end, 0 at or past it', () => {
    expect(recordsBefore('3', '10')).toBe(7);
    expect(recordsBefore(10n, 10n)).toBe(0);
    expect(recordsBefore('12', 10n)).toBe(0);
  });

  it('subtracts 64-bit offsets exactly before making a number of the difference', () => {
    // Both above 2^53, where numbers lose the units: as bigints the difference is exact.
    expect(recordsBefore('9007199254740993', '9007199254741000')).toBe(7);
  });
});

describe('partitionLag', () => {
  const p = { low: '5', high: '20' };

  it('counts from the committed position to the log end', () => {
    expect(partitionLag(p, '8')).toBe(12);
    expect(partitionLag({ low: 5n, high: 20n }, 8n)).toBe(12);
    expect(partitionLag(p, '20')).toBe(0);
  });

  it('counts from the log start for a group with no position: none, or the -1 Kafka answers for none', () => {
    expect(partitionLag(p, null)).toBe(15);
    expect(partitionLag(p, '-1')).toBe(15);
    expect(partitionLag(p, -1n)).toBe(15);
  });

  it('counts a committed position below the log start from that position, as the Kafka adapters always did', () => {
    expect(partitionLag(p, '2')).toBe(18);
  });

  it('is 0, not negative, for a position past the log end', () => {
    expect(partitionLag(p, '25')).toBe(0);
  });
});

describe('recordsHeld', () => {
  it('sums each partition’s log end less its first offset', () => {
    expect(
      recordsHeld([
        { low: '0', high: '4' },
        { low: '10', high: '10' },
        { low: 3n, high: 9n },
      ]),
    ).toBe(10);
    expect(recordsHeld([])).toBe(0);
  });
});

describe('totalLag', () => {
  it('sums the partitions’ lags', () => {
    expect(totalLag([{ lag: 3 }, { lag: 0 }, { lag: 4 }])).toBe(7);
    expect(totalLag([])).toBe(0);
  });
});

describe('recordsBehind', () => {
  it('sums what each partition lacks, a partition absent from `have` being at 0, one ahead counting nothing', () => {
    const want = new Map([
      [0, 10n],
      [1, 5n],
      [2, 7n],
    ]);
    const have = new Map([
      [0, 4n],
      [2, 9n],
    ]);
    expect(recordsBehind(want, have)).toBe(6 + 5);
    expect(recordsBehind(want, want)).toBe(0);
    expect(recordsBehind(new Map(), have)).toBe(0);
  });
});

describe('etaSeconds', () => {
  it('is the remaining records over the rate; 0 when none remain; null when no rate tells', () => {
    expect(etaSeconds(100, 50)).toBe(2);
    expect(etaSeconds(0, 0)).toBe(0);
    expect(etaSeconds(0, 10)).toBe(0);
    expect(etaSeconds(10, 0)).toBeNull();
  });
});
