/**
 * What @platformatic/kafka's produce encoding costs per record, apart from the broker (issue 23): a few seconds of CPU
 * in one process, no infrastructure. Run it under `nice -n 19`:
 *
 *   nice -n 19 pnpm -s tsx bench/src/encodeCost.ts [--records 500] [--requests 300] [--rounds 9]
 *
 * Each round encodes `--requests` produce requests of `--records` records, as the activity projector's metric events
 * reach the client (a key, a JSON value, three headers, spread over 12 partitions), and frames each one as the
 * connection sends it (the request header, the length, one Buffer). It prints the median CPU microseconds per record
 * over the rounds. The machine is shared: compare runs made one after the other, not with another hour's.
 */
import { parseArgs } from 'node:util';
import { produceV11, Writer } from '@platformatic/kafka';

const { values } = parseArgs({
  options: { records: { type: 'string', default: '500' }, requests: { type: 'string', default: '300' }, rounds: { type: 'string', default: '9' } },
});
const RECORDS = Number(values.records);
const REQUESTS = Number(values.requests);
const ROUNDS = Number(values.rounds);

const shop = '0b8f4a8e-1c7e-4f7e-9a51-3f3f1c9d0001';
const value = (i: number) =>
  Buffer.from(
    JSON.stringify({
      shop_id: shop,
      metric: 'order_placed',
      activity_id: `9c1d7a52-0000-4000-8000-${String(i).padStart(12, '0')}`,
      at: new Date(0).toISOString(),
      value: 1,
    }),
  );
const messages = () =>
  Array.from({ length: RECORDS }, (_, i) => ({
    topic: 'shopstream.metric-events',
    partition: i % 12,
    key: Buffer.from(shop),
    value: value(i),
    headers: new Map([
      [Buffer.from('content-type'), Buffer.from('application/json')],
      [Buffer.from('schema'), Buffer.from('metric-event.v1')],
      [Buffer.from('shop_id'), Buffer.from(shop)],
    ]),
  }));

const round = (): number => {
  const batches = Array.from({ length: REQUESTS }, messages);
  const start = process.cpuUsage();
  let bytes = 0;
  for (let r = 0; r < REQUESTS; r++) {
    const payload = produceV11.createRequest(-1, 30_000, batches[r] as never);
    const frame = Writer.create().appendInt16(0).appendInt16(11).appendInt32(r).appendString('bench', false).appendFrom(payload).prependLength();
    bytes += frame.buffer.length;
  }
  const used = process.cpuUsage(start);
  if (bytes === 0) throw new Error('nothing encoded');
  return (used.user + used.system) / (REQUESTS * RECORDS);
};

round(); // warm-up
const perRecord = Array.from({ length: ROUNDS }, round).sort((a, b) => a - b);
console.log(
  `@platformatic/kafka produce encoding: ${perRecord[Math.floor(ROUNDS / 2)].toFixed(2)} µs of CPU per record (median of ${ROUNDS} rounds of ${REQUESTS} requests x ${RECORDS} records; min ${perRecord[0].toFixed(2)}, max ${perRecord[ROUNDS - 1].toFixed(2)})`,
);
