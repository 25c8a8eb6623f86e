import { describe, expect, it } from 'vitest';
import { Partitioners } from 'kafkajs';
import { partitionFor } from './pglog/partitionFor.js';

describe('partitionFor', () => {
  it("places every key in the partition Kafka's default partitioner picks", () => {
    const kafka = Partitioners.DefaultPartitioner();
    const keys = ['', 'a', 'ab', 'abc', 'abcd', 'abcde', 'shop-1', 'é∂ƒ漢字', '0b3c7a4e-51d2-4c8e-9a55-7f2f0b8c9d10'];
    for (let i = 0; i < 500; i++) keys.push(`${i}-${(i * 2654435761) % 1_000_003}`);
    for (const partitions of [1, 3, 12, 31]) {
      const partitionMetadata = Array.from({ length: partitions }, (_, partitionId) => ({
        partitionId,
        leader: 1,
        replicas: [1],
        isr: [1],
        partitionErrorCode: 0,
      }));
      const mine = keys.map((k) => partitionFor(k, partitions));
      const theirs = keys.map((k) => kafka({ topic: 't', partitionMetadata, message: { key: k, value: null } }));
      expect(mine).toEqual(theirs);
    }
  });
});
