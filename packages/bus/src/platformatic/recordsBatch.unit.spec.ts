import { createRecordsBatch, crc32c, Reader, readRecordsBatch } from '@platformatic/kafka';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

// The @platformatic/kafka patch (patches/) writes each record of a produced batch into one Buffer, and keeps the batch
// in one piece, instead of a Buffer per varint, key, value and header. What it writes must read back as the records
// given, under a CRC over the batch's bytes from its attributes on, as a broker checks it.
// Lengths drawn evenly up to max (fast-check's arrays stay short by default, and lengths over 127 take a second varint
// byte), each byte from its position and a seed.
const bytes = (max: number) =>
  fc.tuple(fc.integer({ min: 0, max }), fc.nat(255)).map(([length, seed]) => Buffer.from(Array.from({ length }, (_, i) => (seed + i * 31) & 255)));
const message = fc.record({
  key: fc.option(bytes(300), { nil: undefined }),
  // Up to 20 KB: lengths of one, two and three varint bytes.
  value: fc.option(bytes(20_000), { nil: undefined }),
  headers: fc.option(
    fc.array(fc.tuple(bytes(20), fc.option(bytes(200), { nil: undefined })), { maxLength: 5 }).map((entries) => new Map(entries)),
    { nil: undefined },
  ),
  // Within a millisecond day of the first record, either side: negative and positive deltas.
  delta: fc.integer({ min: -86_400_000, max: 86_400_000 }),
});

describe('the patched produce encoder', () => {
  it('writes batches that read back as the records given, under a CRC of their bytes', () => {
    fc.assert(
      fc.property(fc.array(message, { minLength: 1, maxLength: 30 }), fc.bigInt({ min: 0n, max: 2n ** 41n }), (given, first) => {
        const messages = given.map((m) => ({
          topic: 't',
          partition: 0,
          key: m.key,
          value: m.value,
          headers: m.headers,
          timestamp: first + BigInt(m.delta),
        })) as unknown as Parameters<typeof createRecordsBatch>[0];
        const encoded = createRecordsBatch(messages, { producerId: 7n, producerEpoch: 2, partitionLeaderEpoch: 3 }).buffer;
        const batch = readRecordsBatch(Reader.from(encoded));
        // firstOffset (8 bytes) and length (4) precede what the length counts.
        expect(batch.length).toBe(encoded.length - 12);
        // partitionLeaderEpoch (4), magic (1) and the CRC (4) follow: the CRC covers the rest.
        expect(batch.crc).toBe(crc32c(encoded.subarray(21)));
        expect([batch.magic, batch.partitionLeaderEpoch, batch.producerId, batch.producerEpoch]).toEqual([2, 3, 7n, 2]);
        expect(batch.records.map((r) => r.offsetDelta)).toEqual(given.map((_, i) => i));
        expect(batch.records.map((r) => batch.firstTimestamp + r.timestampDelta)).toEqual(given.map((m) => first + BigInt(m.delta)));
        // A missing key, value or header value is written as null (length -1), an empty one as empty: both kept apart.
        const bytesOf = (b: Buffer | null) => (b === null ? null : Buffer.from(b));
        const asRead = batch.records.map((r) => ({
          key: bytesOf(r.key),
          value: bytesOf(r.value),
          headers: r.headers.map(([k, v]) => [bytesOf(k), bytesOf(v)]),
        }));
        const asGiven = given.map((m) => ({
          key: m.key ?? null,
          value: m.value ?? null,
          headers: [...(m.headers ?? new Map<Buffer, Buffer | undefined>())].map(([k, v]) => [k, v ?? null]),
        }));
        expect(asRead).toEqual(asGiven);
      }),
      { numRuns: 300 },
    );
  });
});
