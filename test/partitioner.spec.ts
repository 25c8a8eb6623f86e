import { execFile, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKafkaBus, createPlatformaticKafkaBus, topicNames, type Bus, type BusRecord } from '@shopstream/bus';
import { buildAsyncApi, type Runtime } from '@shopstream/runtime';
import { ensureKcat, kafkaClasspath, testInfra } from '@shopstream/testkit';
import { startTestRuntime } from '@shopstream/harness';

/**
 * The partitioner is part of the topic contract (docs/operations.md#partitioning, the AsyncAPI document): a record's
 * partition is murmur2 of its key's UTF-8 bytes, positive, modulo the partition count, as the Java client's default
 * partitioner computes it. A producer outside Shopstream that keys `conversations` by shop id must use it, or a shop's
 * records land on two partitions and lose their order. kcat's default (consistent_random: CRC32) is not it; kcat with
 * `-X partitioner=murmur2_random` is.
 */
const PARTITIONS = 12;
// Shop ids as producers send them; fixed, so the comparison with kcat's default partitioner is the same every run.
const keys = Array.from({ length: 24 }, (_, i) => `7f3c${String(i).padStart(4, '0')}-5a1e-4c2b-9d7e-0b6a1c2d3e4f`);

let rt: Runtime;
let topic: string;
beforeAll(async () => {
  rt = await startTestRuntime({}, 'partitioner');
  topic = `${rt.env.TOPIC_PREFIX}partitioner`;
  await rt.bus.ensureTopics([{ topic, partitions: PARTITIONS }]);
}, 60_000);
afterAll(async () => {
  await rt?.close();
});

/** Each key's partition among the topic's records whose value is `who`. */
function partitionsOf(records: BusRecord[], who: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of records) if (r.value.toString() === who && r.key) out.set(r.key, r.partition);
  return out;
}

/** `kcat -P` of one record per key (key and value split by a tab), with these extra arguments. */
async function kcatProduce(value: string, extra: string[]): Promise<void> {
  const kcat = ensureKcat();
  const child = spawn(kcat.bin, ['-P', '-b', testInfra().kafkaBrokers.join(','), '-t', topic, '-K', '\t', ...extra], {
    env: kcat.env,
    stdio: ['pipe', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  child.stdin.end(keys.map((k) => `${k}\t${value}\n`).join(''));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  expect(code, err).toBe(0);
}

describe('the partitioner is a contract: murmur2 of the key bytes', () => {
  it('the AsyncAPI document says so on every message key, with the librdkafka setting', () => {
    const doc = buildAsyncApi(topicNames('')) as { components: { messages: Record<string, { bindings: { kafka: { key: { description: string } } } }> } };
    const keys = Object.values(doc.components.messages).map((m) => m.bindings.kafka.key.description);
    expect(keys.length).toBeGreaterThan(0);
    for (const d of keys) expect(d).toMatch(/murmur2 of the key's UTF-8 bytes.*partitioner=murmur2_random/);
  });

  it("kcat -X partitioner=murmur2_random puts each shop's record on the partition both Shopstream producers do; kcat's default does not", async () => {
    const buses: [string, Bus][] = [
      ['kafkajs', await createKafkaBus({ brokers: testInfra().kafkaBrokers, clientId: 'partitioner-kafkajs', replicationFactor: 1, logger: rt.logger })],
      [
        'platformatic',
        await createPlatformaticKafkaBus({ brokers: testInfra().kafkaBrokers, clientId: 'partitioner-platformatic', replicationFactor: 1, logger: rt.logger }),
      ],
    ];
    try {
      for (const [name, bus] of buses)
        await bus.publish(
          topic,
          keys.map((key) => ({ key, value: Buffer.from(name), headers: {} })),
        );
    } finally {
      for (const [, bus] of buses) await bus.close();
    }
    await kcatProduce('kcat-murmur2', ['-X', 'partitioner=murmur2_random']);
    await kcatProduce('kcat-default', []);

    const records = await rt.bus.read(topic);
    expect(records).toHaveLength(4 * keys.length);
    const kafkajs = partitionsOf(records, 'kafkajs');
    expect(kafkajs.size).toBe(keys.length);
    expect(partitionsOf(records, 'platformatic')).toEqual(kafkajs);
    expect(partitionsOf(records, 'kcat-murmur2')).toEqual(kafkajs);
    // The finding: kcat's own default (consistent_random, CRC32 of the key) sends shops elsewhere.
    const elsewhere = [...partitionsOf(records, 'kcat-default')].filter(([key, p]) => kafkajs.get(key) !== p);
    expect(elsewhere.length).toBeGreaterThan(0);
  }, 120_000);

  it("Shopstream's partition of each key is the Java client's (BuiltInPartitioner.partitionForKey, from the Kafka jars)", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'shopstream-partitioner-'));
    try {
      const program = path.join(dir, 'Partitions.java');
      await writeFile(
        program,
        `import java.nio.charset.StandardCharsets;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
public class Partitions {
  public static void main(String[] a) {
    int n = Integer.parseInt(a[0]);
    for (int i = 1; i < a.length; i++) System.out.println(a[i] + " " + BuiltInPartitioner.partitionForKey(a[i].getBytes(StandardCharsets.UTF_8), n));
  }
}
`,
      );
      const { stdout } = await promisify(execFile)('java', ['-cp', await kafkaClasspath(), program, String(PARTITIONS), ...keys], { timeout: 60_000 });
      const java = new Map(
        stdout
          .trim()
          .split('\n')
          .map((l) => l.split(' '))
          .map(([k, p]) => [k, Number(p)]),
      );
      expect(java.size).toBe(keys.length);
      const records = await rt.bus.read(topic);
      expect(partitionsOf(records, 'kafkajs')).toEqual(java);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
