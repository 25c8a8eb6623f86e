import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { waitFor as poll } from '@shopstream/testkit';
import {
  BusUnavailableError,
  partitionFor,
  PublishAbandonedError,
  type Batch,
  type Bus,
  type BusRecord,
  type OutgoingRecord,
  type Subscription,
} from '@shopstream/bus';

/**
 * What an adapter can do, as its harness declares it, so the suite runs the cases that apply (Watermill
 * `pubsub/tests` style). The port does not say: no caller branches on it.
 */
export interface BusConformanceFeatures {
  /** Members of one group split the partitions between them (Kafka); the Postgres log gives a group's one reader all. */
  consumerGroupsSharePartitions: boolean;
  /**
   * Appends are database transactions whose commit order the adapter must reconcile with offset order
   * (the Postgres log). False when the log itself assigns offsets as it commits (Kafka), where the
   * out-of-order case cannot be built and the log guarantees it.
   */
  transactionalAppends: boolean;
}

/** An append whose transaction was started and left open. */
export interface HeldAppend {
  /** True once another append or read is waiting for this transaction (or would be, on one connection). */
  othersWaiting(): Promise<boolean>;
  commit(): Promise<void>;
}

export interface BusConformanceHarness {
  name: string;
  kind: 'kafka' | 'pglog';
  features: BusConformanceFeatures;
  /** A new bus client on the shared backend, as another process would open it. */
  newBus(): Promise<Bus>;
  /** A bus whose backend cannot be reached. */
  unreachableBus(): Promise<Bus>;
  /** A topic name no other case or file uses. */
  topicName(label: string): string;
  /** Only with transactionalAppends: appends the records in a transaction that stays open until commit(). */
  holdAppend?(item: { topic: string; partitions: number; records: OutgoingRecord[] }): Promise<HeldAppend>;
  /** Only with consumerGroupsSharePartitions: resolves once the group has n members, each assigned partitions. */
  waitForGroupMembers?(groupId: string, members: number): Promise<void>;
  /** How long a case waits for records to arrive. */
  timeoutMs?: number;
}

const PARTITIONS = 3;

/** The suite's polls: testkit's waitFor, every 25 ms. */
const waitFor = <T>(fn: () => Promise<T | false | null | undefined> | T | false | null | undefined, timeoutMs: number, message: string): Promise<T> =>
  poll(fn, { timeoutMs, message, intervalMs: 25 });

/** The fields a case compares: everything but the timestamp. */
const view = (r: BusRecord) => ({ topic: r.topic, partition: r.partition, offset: r.offset, key: r.key, value: r.value.toString('utf8'), headers: r.headers });

/**
 * Expected records of one publish sequence: each lands in partition murmur2(key) % partitions (the
 * Kafka default partitioner, which both adapters follow), at the next dense offset of that partition.
 */
function expectedLog(topic: string, published: OutgoingRecord[], partitions = PARTITIONS, startAt: Record<number, number> = {}) {
  const next: Record<number, number> = { ...startAt };
  return published.map((r) => {
    const partition = partitionFor(r.key, partitions);
    const offset = next[partition] ?? 0;
    next[partition] = offset + 1;
    return {
      topic,
      partition,
      offset: String(offset),
      key: r.key,
      value: typeof r.value === 'string' ? r.value : r.value.toString('utf8'),
      headers: r.headers ?? {},
    };
  });
}

const byLogPosition = (a: { partition: number; offset: string }, b: { partition: number; offset: string }) =>
  a.partition - b.partition || Number(BigInt(a.offset) - BigInt(b.offset));

/** Keys that between them hit every partition, `perPartition` keys each. */
function keysCoveringPartitions(perPartition: number, partitions = PARTITIONS): string[] {
  const found: string[][] = Array.from({ length: partitions }, () => []);
  for (let i = 0; found.some((f) => f.length < perPartition); i++) {
    const key = `shop-${i}`;
    const p = partitionFor(key, partitions);
    if (found[p].length < perPartition) found[p].push(key);
  }
  return found.flat();
}

/** Runs the Bus port's conformance cases against one adapter. */
export function busConformance(h: BusConformanceHarness): void {
  // A rebalance on a 2-core machine that other work shares can take most of a minute: a deadline, not a pace.
  const timeoutMs = h.timeoutMs ?? 90_000;

  describe(`Bus conformance: ${h.name}`, () => {
    const buses: Bus[] = [];
    const subs: Subscription[] = [];

    const bus = async () => {
      const b = await h.newBus();
      buses.push(b);
      return b;
    };
    const topic = async (b: Bus, label: string) => {
      const t = h.topicName(label);
      await b.ensureTopics([{ topic: t, partitions: PARTITIONS }]);
      return t;
    };
    const groupId = (label: string) => `g-${label}-${randomUUID()}`;

    /** Consumes into arrays; `fail` decides per batch whether the handler throws. */
    const collect = async (b: Bus, group: string, topics: string[], fail: (batch: Batch, attempt: number) => boolean = () => false) => {
      const attempts: Batch[] = [];
      const handled: BusRecord[] = [];
      const sub = await b.consume({
        groupId: group,
        topics,
        fromBeginning: true,
        handleBatch: async (batch) => {
          attempts.push(batch);
          if (fail(batch, attempts.length)) throw new Error(`conformance: handler fails batch ${batch.partition}@${batch.records[0].offset}`);
          handled.push(...batch.records);
        },
      });
      subs.push(sub);
      return { attempts, handled, sub };
    };
    const stop = async (sub: Subscription) => {
      subs.splice(subs.indexOf(sub), 1);
      await sub.stop();
    };
    const lagOf = async (b: Bus, group: string, t: string) =>
      (await b.lag(group, [t])).map(({ topic: lt, partition, lag }) => ({ topic: lt, partition, lag })).sort((x, y) => x.partition - y.partition);
    const zeroLag = (t: string) => Array.from({ length: PARTITIONS }, (_, partition) => ({ topic: t, partition, lag: 0 }));

    /**
     * Three records of `key` handled and committed by a group that then stopped, and two more published after: what
     * a restarted member of the group resumes on.
     */
    const threeCommittedThenTwo = async (label: string, key: string) => {
      const b = await bus();
      const t = await topic(b, label);
      const first = [0, 1, 2].map((i) => ({ key, value: `${label}${i}` }));
      await b.publish(t, first);
      const g = groupId(label);
      const a = await collect(b, g, [t]);
      await waitFor(async () => a.handled.length === 3 && (await lagOf(b, g, t)).every((l) => l.lag === 0), timeoutMs, 'first three committed');
      await stop(a.sub);
      const second = [3, 4].map((i) => ({ key, value: `${label}${i}` }));
      await b.publish(t, second);
      return { b, t, g, a, first, second };
    };

    afterEach(async () => {
      await Promise.all(subs.splice(0).map((s) => s.stop()));
    });
    afterAll(async () => {
      await Promise.all(buses.splice(0).map((b) => b.close()));
    });

    it('describes itself as its kind does', async () => {
      const b = await bus();
      // What callers ask of the port instead of branching on a kind (the CLI's text, span attributes, the runtime's start).
      expect(b.description).toMatch(h.kind === 'kafka' ? /^Kafka at \S+:\d+/ : /^the Postgres log$/);
      expect(b.messagingSystem).toBe(h.kind === 'kafka' ? 'kafka' : 'shopstream_pglog');
      expect(b.selfManaged).toBe(h.kind === 'pglog');
      expect(await b.ping()).toBe(true);
    });

    it('publishes and consumes: every record once, with its key, value, headers, partition and offset', async () => {
      const b = await bus();
      const t = await topic(b, 'basic');
      const published: OutgoingRecord[] = keysCoveringPartitions(2).map((key, i) => ({
        key,
        value: i % 2 === 0 ? `{"n":${i}}` : Buffer.from(`{"n":${i}}`, 'utf8'),
        headers: { 'content-type': 'application/json', n: String(i) },
      }));
      await b.publish(t, published);
      const want = expectedLog(t, published);
      expect(await lagOf(b, groupId('nobody'), t)).toEqual([0, 1, 2].map((partition) => ({ topic: t, partition, lag: 2 })));

      const g = groupId('basic');
      const c = await collect(b, g, [t]);
      await waitFor(() => c.handled.length >= want.length, timeoutMs, `${want.length} records`);
      expect(c.handled.map(view).sort(byLogPosition)).toEqual(want.sort(byLogPosition));
      for (const r of c.handled) expect(r.timestamp).toBeGreaterThan(0);
      await waitFor(async () => (await lagOf(b, g, t)).every((l) => l.lag === 0), timeoutMs, 'lag 0');
      expect(await lagOf(b, g, t)).toEqual(zeroLag(t));
      expect(c.handled).toHaveLength(want.length);
    });

    it('keeps the order of records with one key, across publishes', async () => {
      const b = await bus();
      const t = await topic(b, 'order');
      const keys = keysCoveringPartitions(1);
      const published: OutgoingRecord[] = [];
      for (let round = 0; round < 10; round++) {
        const chunk = keys.flatMap((key) => [0, 1].map((j) => ({ key, value: `${key}:${round * 2 + j}` })));
        published.push(...chunk);
        await b.publish(t, chunk);
      }
      const c = await collect(b, groupId('order'), [t]);
      await waitFor(() => c.handled.length >= published.length, timeoutMs, `${published.length} records`);
      expect(c.handled).toHaveLength(published.length);
      for (const key of keys) {
        const got = c.handled.filter((r) => r.key === key);
        expect(got.map((r) => r.value.toString())).toEqual(Array.from({ length: 20 }, (_, i) => `${key}:${i}`));
        expect(got.map((r) => r.offset)).toEqual(Array.from({ length: 20 }, (_, i) => String(i)));
        expect(new Set(got.map((r) => r.partition))).toEqual(new Set([partitionFor(key, PARTITIONS)]));
      }
    });

    it('delivers a batch again, from its first record, after the handler threw', async () => {
      const b = await bus();
      const t = await topic(b, 'redeliver');
      const published = [0, 1, 2].map((i) => ({ key: 'shop-a', value: `a${i}` }));
      await b.publish(t, published);
      const g = groupId('redeliver');
      const c = await collect(b, g, [t], (_batch, attempt) => attempt === 1);
      await waitFor(() => c.handled.length >= 3, timeoutMs, 'three records handled after the failure');
      const p = partitionFor('shop-a', PARTITIONS);
      expect(c.attempts[0].records.map((r) => r.offset)[0]).toBe('0');
      expect(c.attempts[1].records[0].offset).toBe('0');
      expect(c.attempts[1].partition).toBe(p);
      expect(c.handled.map(view)).toEqual(expectedLog(t, published));
      await waitFor(async () => (await lagOf(b, g, t)).every((l) => l.lag === 0), timeoutMs, 'lag 0');
      expect(c.handled).toHaveLength(3);
    });

    it('commits only after the handler succeeded: a record whose handler failed goes to the next member of the group', async () => {
      const b = await bus();
      const t = await topic(b, 'no-commit');
      const published = [{ key: 'shop-b', value: 'only' }];
      await b.publish(t, published);
      const g = groupId('no-commit');
      const failing = await collect(b, g, [t], () => true);
      await waitFor(() => failing.attempts.length >= 2, timeoutMs, 'two failed attempts');
      await stop(failing.sub);
      expect(failing.handled).toEqual([]);
      expect(failing.attempts.every((a) => a.records[0].offset === '0')).toBe(true);
      const p = partitionFor('shop-b', PARTITIONS);
      expect(await lagOf(b, g, t)).toEqual(zeroLag(t).map((l) => (l.partition === p ? { ...l, lag: 1 } : l)));

      const next = await collect(await bus(), g, [t]);
      await waitFor(() => next.handled.length >= 1, timeoutMs, 'the failed record, again');
      expect(next.handled.map(view)).toEqual(expectedLog(t, published));
    });

    it('resumes at the committed position after a restart of the group', async () => {
      const { t, g, a, first, second } = await threeCommittedThenTwo('resume', 'shop-c');
      const again = await collect(await bus(), g, [t]);
      await waitFor(() => again.handled.length >= 2, timeoutMs, 'two new records');
      const p = partitionFor('shop-c', PARTITIONS);
      expect(again.handled.map(view)).toEqual(expectedLog(t, second, PARTITIONS, { [p]: 3 }));
      expect(a.handled.map(view)).toEqual(expectedLog(t, first));
    });

    it('marks the first batch of a partition after a start as resumed, and delivers it again from the offset a handler rewinds to', async () => {
      const { b, t, g, first, second } = await threeCommittedThenTwo('rewind', 'shop-r');
      const p = partitionFor('shop-r', PARTITIONS);
      const seen: { offset: string; resumed: boolean }[] = [];
      const handled: BusRecord[] = [];
      let rewound = false;
      const sub = await (
        await bus()
      ).consume({
        groupId: g,
        topics: [t],
        fromBeginning: true,
        handleBatch: async (batch, ctx) => {
          seen.push({ offset: batch.records[0].offset, resumed: ctx.resumed });
          if (!rewound) {
            rewound = true;
            ctx.rewind('1');
            return;
          }
          handled.push(...batch.records);
        },
      });
      subs.push(sub);
      await waitFor(() => handled.some((r) => r.offset === '4'), timeoutMs, 'the partition again from offset 1, to its end');
      // The first batch resumed at the committed position (3); after the rewind the partition came again from 1.
      expect(seen[0]).toEqual({ offset: '3', resumed: true });
      expect(seen[1]).toEqual({ offset: '1', resumed: true });
      expect(seen.slice(2).every((s) => !s.resumed)).toBe(true);
      expect(handled.map(view)).toEqual(expectedLog(t, [...first, ...second].slice(1), PARTITIONS, { [p]: 1 }));
      await waitFor(async () => (await lagOf(b, g, t)).every((l) => l.lag === 0), timeoutMs, 'lag 0 after the rewound records');
    });

    it('reports where each partition starts and ends, and forgets a deleted group', async () => {
      const b = await bus();
      const t = await topic(b, 'offsets');
      expect(await b.offsets(t)).toEqual([0, 1, 2].map((partition) => ({ partition, low: '0', high: '0' })));
      const published = keysCoveringPartitions(2).map((key, i) => ({ key, value: `v${i}` }));
      await b.publish(t, published);
      expect(await b.offsets(t)).toEqual([0, 1, 2].map((partition) => ({ partition, low: '0', high: '2' })));
      const g = groupId('forget');
      const c = await collect(b, g, [t]);
      await waitFor(async () => (await lagOf(b, g, t)).every((l) => l.lag === 0), timeoutMs, 'lag 0');
      await stop(c.sub);
      await b.deleteGroup(g);
      // Forgotten: its lag is the whole log again, and a new member starts from the beginning.
      expect(await lagOf(b, g, t)).toEqual([0, 1, 2].map((partition) => ({ topic: t, partition, lag: 2 })));
      const again = await collect(b, g, [t]);
      await waitFor(() => again.handled.length >= 6, timeoutMs, 'six records again');
      await b.deleteGroup(groupId('never-existed'));
    });

    it('reads a topic to its end without a consumer group: every partition, or one from an offset, with a limit', async () => {
      const b = await bus();
      const t = await topic(b, 'read');
      expect(await b.read(t)).toEqual([]);
      const published = keysCoveringPartitions(3).map((key, i) => ({ key, value: `r${i}`, headers: { n: String(i) } }));
      await b.publish(t, published);
      const want = expectedLog(t, published).sort(byLogPosition);
      const all = await b.read(t);
      expect(all.map(view)).toEqual(want);
      for (const r of all) expect(r.timestamp).toBeGreaterThan(0);

      const one = want.filter((r) => r.partition === 1);
      expect((await b.read(t, { partition: 1 })).map(view)).toEqual(one);
      expect((await b.read(t, { partition: 1, fromOffset: '1' })).map(view)).toEqual(one.slice(1));
      expect((await b.read(t, { partition: 1, fromOffset: '1', limit: 1 })).map(view)).toEqual(one.slice(1, 2));
      expect(await b.read(t, { partition: 1, fromOffset: '3' })).toEqual([]);
      expect((await b.read(t, { limit: 2 })).map(view)).toEqual(want.filter((r) => Number(r.offset) < 2));
      await expect(b.read(t, { partition: PARTITIONS })).rejects.toThrow(/no partition/);

      // Nothing was consumed: the same records again, and one published since, at the end of its partition.
      const later = { key: one[0].key, value: 'later' };
      await b.publish(t, [later]);
      expect((await b.read(t)).map(view)).toEqual([...want, ...expectedLog(t, [later], PARTITIONS, { 1: 3 })].sort(byLogPosition));
      expect(await b.offsets(t)).toEqual([0, 1, 2].map((partition) => ({ partition, low: '0', high: partition === 1 ? '4' : '3' })));
    });

    it('creates topics with the retention of their spec, reads it back, and aligns an existing topic once', async () => {
      const b = await bus();
      const kept = h.topicName('retention-kept');
      const derived = h.topicName('retention-derived');
      const drifted = h.topicName('retention-drifted');
      const forever = { 'retention.ms': '-1', 'retention.bytes': '-1' };
      await b.ensureTopics([
        { topic: kept, partitions: 1, config: forever },
        { topic: derived, partitions: 1, config: { 'retention.ms': '3600000', 'retention.bytes': '-1' } },
        { topic: drifted, partitions: 1, config: { 'retention.ms': '86400000' } },
      ]);
      const read = await b.topicConfigs([kept, derived, drifted]);
      const retention = (t: string) => ({ ms: read[t]['retention.ms'], bytes: read[t]['retention.bytes'] });
      expect(retention(kept)).toEqual({ ms: '-1', bytes: '-1' });
      expect(retention(derived)).toEqual({ ms: '3600000', bytes: '-1' });
      expect(retention(drifted).ms).toBe('86400000');

      // ensureTopics leaves an existing topic's settings alone; alignTopicConfigs is what changes them.
      await b.ensureTopics([{ topic: drifted, partitions: 1, config: forever }]);
      expect((await b.topicConfigs([drifted]))[drifted]['retention.ms']).toBe('86400000');
      const changes = await b.alignTopicConfigs([
        { topic: kept, partitions: 1, config: forever },
        { topic: drifted, partitions: 1, config: forever },
        { topic: h.topicName('retention-never-created'), partitions: 1, config: forever },
      ]);
      expect(changes.find((c) => c.name === 'retention.ms')).toEqual({ topic: drifted, name: 'retention.ms', from: '86400000', inherited: false, to: '-1' });
      // Kafka also records retention.bytes as the topic's own setting (it was inherited); the Postgres log has no such limit.
      expect(changes.every((c) => c.topic === drifted && c.to === '-1')).toBe(true);
      expect((await b.topicConfigs([drifted]))[drifted]['retention.ms']).toBe('-1');
      expect(await b.alignTopicConfigs([{ topic: drifted, partitions: 1, config: forever }])).toEqual([]);
    });

    it('gives every record to each of two groups', async () => {
      const b = await bus();
      const t = await topic(b, 'two-groups');
      const published = keysCoveringPartitions(2).map((key, i) => ({ key, value: `v${i}` }));
      const g1 = await collect(b, groupId('one'), [t]);
      const g2 = await collect(await bus(), groupId('two'), [t]);
      await b.publish(t, published);
      await waitFor(() => g1.handled.length >= 6 && g2.handled.length >= 6, timeoutMs, 'six records in each group');
      const want = expectedLog(t, published).sort(byLogPosition);
      expect(g1.handled.map(view).sort(byLogPosition)).toEqual(want);
      expect(g2.handled.map(view).sort(byLogPosition)).toEqual(want);
    });

    it.runIf(h.features.transactionalAppends)('never skips a record whose append committed after a later one started', async () => {
      if (!h.holdAppend) throw new Error(`${h.name} declares transactionalAppends but its harness has no holdAppend`);
      const b = await bus();
      const t = await topic(b, 'out-of-order');
      const c = await collect(b, groupId('out-of-order'), [t]);
      const held = [
        { key: 'shop-d', value: 'first-taken' },
        { key: 'shop-d', value: 'first-taken-2' },
      ];
      const later = [{ key: 'shop-d', value: 'started-later' }];
      const hold = await h.holdAppend({ topic: t, partitions: PARTITIONS, records: held });
      let laterDone = false;
      const publishing = b.publish(t, later).then(() => (laterDone = true));
      // A log that numbered the later append first and let it commit would hand it to the consumer now,
      // and the consumer would move past the held records' numbers: wait until that would have happened.
      await waitFor(async () => laterDone || c.handled.length > 0 || (await hold.othersWaiting()), timeoutMs, 'the later append to commit or wait');
      await hold.commit();
      await publishing;
      await waitFor(() => c.handled.length >= 3, timeoutMs, 'all three records');
      expect(c.handled.map(view)).toEqual(expectedLog(t, [...held, ...later]));
    });

    it.runIf(h.features.consumerGroupsSharePartitions)('splits the partitions between two members of one group', async () => {
      if (!h.waitForGroupMembers) throw new Error(`${h.name} declares consumerGroupsSharePartitions but its harness has no waitForGroupMembers`);
      const b = await bus();
      const t = await topic(b, 'share');
      const g = groupId('share');
      const m1 = await collect(b, g, [t]);
      const m2 = await collect(await bus(), g, [t]);
      await h.waitForGroupMembers(g, 2);
      const published = keysCoveringPartitions(3).map((key, i) => ({ key, value: `s${i}` }));
      await b.publish(t, published);
      await waitFor(() => m1.handled.length + m2.handled.length >= published.length, timeoutMs, `${published.length} records between the members`);
      const p1 = new Set(m1.handled.map((r) => r.partition));
      const p2 = new Set(m2.handled.map((r) => r.partition));
      expect(p1.size).toBeGreaterThan(0);
      expect(p2.size).toBeGreaterThan(0);
      expect([...p1].filter((p) => p2.has(p))).toEqual([]);
      expect([...m1.handled, ...m2.handled].map(view).sort(byLogPosition)).toEqual(expectedLog(t, published).sort(byLogPosition));
    });

    it('leaves out a publish whose caller abandoned it by the time its records are taken to be written, and writes the rest', async () => {
      const b = await bus();
      const t = await topic(b, 'abandoned');
      const key = keysCoveringPartitions(1)[0];
      // Abandoned only after publish was called: the adapter asks when it writes, not when it is handed the records.
      let gone = false;
      const dropped = b.publish(t, [{ key, value: 'dropped' }], { abandoned: () => gone });
      const kept = b.publish(t, [{ key, value: 'kept' }], { abandoned: () => false });
      gone = true;
      await expect(dropped).rejects.toBeInstanceOf(PublishAbandonedError);
      await kept;
      await b.publish(t, [{ key, value: 'after' }]);
      const c = await collect(b, groupId('abandoned'), [t]);
      await waitFor(() => c.handled.length >= 2, timeoutMs, 'two records');
      await waitFor(
        async () => (await lagOf(b, groupId('abandoned-nobody'), t)).reduce((n, l) => n + l.lag, 0) === 2,
        timeoutMs,
        'the log holding two records',
      );
      expect(c.handled.map((r) => r.value.toString())).toEqual(['kept', 'after']);
    });

    it('rejects publish with BusUnavailableError and pings false when the backend is unreachable', async () => {
      const b = await h.unreachableBus();
      buses.push(b);
      const err = await b.publish(h.topicName('unreachable'), [{ key: 'k', value: 'v' }]).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(BusUnavailableError);
      expect(await b.ping()).toBe(false);
    });
  });
}
