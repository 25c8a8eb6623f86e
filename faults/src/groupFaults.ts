/**
 * What the pause, scale and slow-broker scenarios share: a pipeline of separate processes on a broker and a
 * PostgreSQL of its own (ingest-api, activity-projector replicas, the flow matcher), a steady single-event load
 * spread over every partition, each consumer process's progress from its own /metrics, its place in its group
 * from the broker's description of the group, and the end checks (lost, doubled, metric events per activity).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import kafkajs, { Kafka, Partitioners, logLevel, type Admin } from 'kafkajs';
import { Pool } from 'undici';
import { topics } from '@shopstream/contracts';
import { sql, type Db } from '@shopstream/db';
import type { KafkaHandle } from '@shopstream/testkit';
import { missingActivities, whenCaughtUp } from './caughtUp.js';
import { ownKafka } from './ownKafka.js';
import { ownPostgres } from './ownPostgres.js';
import { jsonOrUndefined, serviceEnv, startScenarioService, until, untilReady, type Service } from './services.js';
import type { Context, Row } from './types.js';
import { sec } from './scenarioFigures.js';

const { AssignerProtocol } = kafkajs;

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Few enough for a 2-core machine, enough for three replicas to hold two each. */
export const PARTITIONS = 6;
const GROUP_PREFIX = 'shopstream.';

/** A consumer group and the topic it reads. */
export interface Group {
  id: string;
  topic: string;
}
export const projectorGroup: Group = { id: `${GROUP_PREFIX}activity-projector`, topic: topics.events };
export const matcherGroup: Group = { id: `${GROUP_PREFIX}flow-matcher`, topic: topics.metrics };

/** A consumer service's process, named by its label, which is also the start of its Kafka client id. */
export interface ConsumerProcess {
  label: string;
  service: Service;
  group: Group;
  /** Its records handled so far, sampled from its /metrics: [when, how many]. */
  handled: [number, number][];
}

export interface Pipeline {
  db: Db;
  kafka: KafkaHandle;
  admin: Admin;
  ingest: Service;
  /** One shop per partition of `events` (and of `metrics`, keyed alike): the load reaches every partition. */
  shops: string[];
  key: string;
  consumers: ConsumerProcess[];
  versions: { kafka: string; postgres: string };
  /** Starts another consumer process (activity-projector or flow-matcher) under its label. */
  startConsumer(name: 'activity-projector' | 'flow-matcher', label: string): ConsumerProcess;
}

/** Shop ids whose records land on partitions 0..n-1 by kafkajs' default partitioner, the one the services key by shop with. */
function shopsOverPartitions(n: number): string[] {
  const partitioner = Partitioners.DefaultPartitioner();
  const partitionMetadata = Array.from({ length: n }, (_, i) => ({ partitionId: i, leader: 0, replicas: [0], isr: [0], partitionErrorCode: 0 }));
  const byPartition = new Map<number, string>();
  while (byPartition.size < n) {
    const shop = randomUUID();
    const p = partitioner({ topic: topics.events, partitionMetadata, message: { key: shop, value: null } });
    if (!byPartition.has(p)) byPartition.set(p, shop);
  }
  return [...byPartition.entries()].sort((a, b) => a[0] - b[0]).map(([, s]) => s);
}

/**
 * Its own PostgreSQL and broker, ingest-api, and the consumer processes asked for (each with its own port,
 * so its own group instance, and its label as KAFKA_CLIENT_ID, so the group's description tells the processes
 * apart). Every consumer's /metrics is sampled every 500 ms until the scenario ends.
 */
export async function startPipeline(ctx: Context, consumers: { name: 'activity-projector' | 'flow-matcher'; label: string }[]): Promise<Pipeline> {
  const pg = await ownPostgres(ctx, { poolSize: 2 });
  const kafka = await ownKafka(ctx);
  const shops = shopsOverPartitions(PARTITIONS);
  const key = `faults_${randomBytes(24).toString('base64url')}`;
  const env = serviceEnv(
    { databaseUrl: pg.url, brokers: kafka.brokers, apiKeys: `${key}=${shops.join(',')}` },
    { KAFKA_PARTITIONS: String(PARTITIONS), CONSUMER_GROUP_PREFIX: GROUP_PREFIX },
  );
  // ingest first: it creates the topics and applies the migrations the consumers then find.
  const ingest = startScenarioService(ctx, 'ingest-api', { ...env, KAFKA_CLIENT_ID: 'ingest' });
  await untilReady(ingest, 180_000, 250);
  const admin = new Kafka({ clientId: 'faults-groups', brokers: kafka.brokers, logLevel: logLevel.NOTHING, requestTimeout: 10_000 }).admin();
  await admin.connect();
  ctx.defer(() => admin.disconnect());
  const list: ConsumerProcess[] = [];
  const startConsumer = (name: 'activity-projector' | 'flow-matcher', label: string): ConsumerProcess => {
    const service = startScenarioService(ctx, name, { ...env, KAFKA_CLIENT_ID: label, LOG_LEVEL: 'info' });
    // A process left stopped by a scenario that failed midway would hold its SIGTERM until the kill's 15 s SIGKILL.
    ctx.defer(() => void service.process.kill('SIGCONT'));
    const c: ConsumerProcess = { label, service, group: name === 'flow-matcher' ? matcherGroup : projectorGroup, handled: [] };
    list.push(c);
    return c;
  };
  for (const c of consumers) startConsumer(c.name, c.label);
  for (const c of list) await untilReady(c.service, 180_000, 250);
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const t = Date.now();
      await Promise.all(
        list.map(async (c) => {
          const n = await handledBy(c.service);
          if (n !== undefined) c.handled.push([t, n]);
        }),
      );
      await sleep(Math.max(0, 500 - (Date.now() - t)));
    }
  })();
  ctx.defer(async () => {
    sampling = false;
    await sampler;
  });
  ctx.log(`pipeline ready: ingest-api and ${list.map((c) => `${c.label} (pid ${c.service.process.pid})`).join(', ')}`);
  return { db: pg.db, kafka, admin, ingest, shops, key, consumers: list, versions: { kafka: kafka.version, postgres: pg.version }, startConsumer };
}

/** Records a consumer process has handled (applied, skipped as duplicates, dead-lettered), from its /metrics; undefined when it does not answer within 1 s. */
const handledBy = (s: Service): Promise<number | undefined> => metricTotal(s, 'shopstream_consumer_records_total');

/**
 * The sum of a counter's series in a process's /metrics whose labels include each of `labels` (`status="499"`);
 * undefined when it does not answer within `timeoutMs`.
 */
export async function metricTotal(s: Service, name: string, labels: string[] = [], timeoutMs = 1_000): Promise<number | undefined> {
  try {
    const res = await fetch(`${s.baseUrl}/metrics`, { signal: AbortSignal.timeout(timeoutMs) });
    const text = await res.text();
    let n = 0;
    for (const m of text.matchAll(/^(\w+)\{([^}]*)\} (\d+(?:\.\d+)?(?:e\+\d+)?)$/gm)) {
      if (m[1] === name && labels.every((l) => m[2].includes(l))) n += Number(m[3]);
    }
    return n;
  } catch {
    return undefined;
  }
}

/**
 * When a consumer process applies records again after `at` (its SIGCONT, or the SIGCONT that let records flow to
 * it again), in milliseconds from `at`: it holds partitions in its group's description (polled every 250 ms), and
 * then a sample of its handled records rises. Holding partitions first keeps the batch it was in the middle of
 * when frozen, which completes on the SIGCONT before any rejoin, from counting. Undefined after timeoutMs.
 */
export async function applyingAgain(admin: Admin, c: ConsumerProcess, at: number, timeoutMs = 60_000): Promise<{ ms?: number; memberMs?: number }> {
  let memberAt: number | undefined;
  let base = 0;
  while (Date.now() - at < timeoutMs) {
    if (memberAt === undefined) {
      const view = await describeGroup(admin, c.group).catch(() => undefined);
      if (view?.state === 'Stable' && (memberOf(view, c.label)?.partitions.length ?? 0) > 0) {
        memberAt = Date.now();
        base = [...c.handled].reverse().find(([t]) => t <= memberAt!)?.[1] ?? 0;
      }
    }
    if (memberAt !== undefined) {
      const moved = c.handled.find(([t, n]) => t > memberAt! && n > base);
      if (moved) return { ms: moved[0] - at, memberMs: memberAt - at };
    }
    await sleep(250);
  }
  return { memberMs: memberAt === undefined ? undefined : memberAt - at };
}

/** A group as the broker describes it: its state, and each member's client id and partitions. */
export interface GroupView {
  state: string;
  members: { clientId: string; partitions: number[] }[];
  /** Every partition of the topic held by exactly one member. */
  covered: boolean;
}

export async function describeGroup(admin: Admin, g: Group): Promise<GroupView> {
  const { groups } = await admin.describeGroups([g.id]);
  const d = groups[0];
  const members = (d?.members ?? []).map((m) => {
    const a = m.memberAssignment.length > 0 ? AssignerProtocol.MemberAssignment.decode(m.memberAssignment) : null;
    return { clientId: m.clientId, partitions: [...(a?.assignment[g.topic] ?? [])].sort((x, y) => x - y) };
  });
  const held = members.flatMap((m) => m.partitions);
  const covered = held.length === PARTITIONS && new Set(held).size === PARTITIONS;
  return { state: d?.state ?? 'Unknown', members, covered };
}

/** Whether a member of this view is the process with this label (its client id is `<label>-<service>`). */
export const memberOf = (v: GroupView, label: string) => v.members.find((m) => m.clientId.startsWith(`${label}-`));

/**
 * Polls the group's description every 250 ms until it is stable with exactly these processes as members, each
 * holding at least one partition and all partitions held once; the time it took, or undefined after timeoutMs.
 */
export async function untilAssigned(admin: Admin, g: Group, labels: string[], timeoutMs: number): Promise<{ ms?: number; last?: GroupView }> {
  let last: GroupView | undefined;
  try {
    const ms = await until(
      async () => {
        last = await describeGroup(admin, g);
        return (
          last.state === 'Stable' &&
          last.covered &&
          last.members.length === labels.length &&
          labels.every((l) => (memberOf(last!, l)?.partitions.length ?? 0) > 0)
        );
      },
      timeoutMs,
      `${g.id} assigned to ${labels.join(', ')}`,
      250,
    );
    return { ms, last };
  } catch {
    // Never assigned so within timeoutMs: a finding, answered as no time and the last view seen.
    return { ms: undefined, last };
  }
}

/** The group's lag over every partition of its topic: the log's end minus the committed offset (none committed: all of it). */
export async function groupLag(admin: Admin, g: Group): Promise<number> {
  const ends = await admin.fetchTopicOffsets(g.topic);
  const [committed] = await admin.fetchOffsets({ groupId: g.id, topics: [g.topic] });
  const at = new Map(committed.partitions.map((p) => [p.partition, Number(p.offset)]));
  return ends.reduce((sum, e) => {
    const c = at.get(e.partition) ?? -1;
    return sum + Number(e.high) - (c >= 0 ? c : Number(e.low));
  }, 0);
}

/** One answer of the load: when the request was sent, how long its answer took, its status and whether a 503 had Retry-After. */
export interface Answer {
  sentAt: number;
  ms: number;
  status: string;
  retryAfter: boolean;
}

export interface Load {
  answers: Answer[];
  /** Activity ids answered 202. */
  accepted: string[];
  /** Requests not sent because this process already had its cap of requests open. */
  skipped(): number;
  sent(): number;
  /**
   * Waits until ingest keeps up: fewer than a second's requests open at 8 samples in a row, 250 ms apart (a
   * service just started, on a busy machine, can take many seconds to). The time it took, or undefined after timeoutMs.
   */
  steady(timeoutMs: number): Promise<number | undefined>;
  /** Stops sending and waits for every open request's answer (or its 15 s timeout). */
  stop(): Promise<{ startedAt: number; endedAt: number }>;
}

/**
 * Single events at `rate` a second, open loop, round-robin over the shops (so over every partition); half keyed
 * with a remote_id (a replay would show as a second activity of one key), half with a contact. Each request has
 * 15 s, its wait for a connection included; at most rate x 25 are open at once (a stopped ingest-api holds every one), the rest skipped and counted.
 * undici's pool, not fetch: a third of the CPU per request on a busy machine.
 */
export function startLoad(ctx: Context, p: Pick<Pipeline, 'ingest' | 'shops' | 'key'>, rate: number): Load {
  const run = randomBytes(4).toString('hex');
  const pool = new Pool(p.ingest.baseUrl, { connections: rate * 7, pipelining: 1, keepAliveTimeout: 30_000, headersTimeout: 15_000, bodyTimeout: 15_000 });
  ctx.defer(() => pool.close());
  const answers: Answer[] = [];
  const accepted: string[] = [];
  const inflight = new Set<Promise<void>>();
  const maxInflight = rate * 25;
  let sent = 0;
  let skipped = 0;
  const one = async (i: number) => {
    const shop = p.shops[i % p.shops.length];
    const keyed = (i >> 1) % 2 === 0;
    const body = {
      name: 'Placed order',
      metric: { metric_name: 'placed_order', value: i },
      ...(keyed ? { remote_id: `${run}-${i}`, remote_platform: 'faults' } : {}),
      ...(i % 2 === 0 ? { contact: { email: `c${i % 400}@example.com` } } : {}),
    };
    const sentAt = Date.now();
    let status = 'timeout';
    let retryAfter = false;
    try {
      const res = await pool.request({
        path: '/v2026-04/events/',
        method: 'POST',
        headers: { authorization: `Bearer ${p.key}`, 'x-shop-id': shop, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        // The whole request, its wait for a connection of the pool included: headersTimeout starts only once it is sent.
        signal: AbortSignal.timeout(15_000),
      });
      status = String(res.statusCode);
      retryAfter = res.headers['retry-after'] !== undefined;
      const parsed = jsonOrUndefined(await res.body.text());
      if (res.statusCode === 202 && typeof parsed?.activity_id === 'string') accepted.push(parsed.activity_id);
    } catch {
      status = 'timeout';
    }
    answers.push({ sentAt, ms: Date.now() - sentAt, status, retryAfter });
  };
  let on = true;
  const startedAt = Date.now();
  const loop = (async () => {
    let slots = 0;
    while (on) {
      const due = Math.floor(((Date.now() - startedAt) / 1000) * rate);
      while (slots < due) {
        const i = slots++;
        if (inflight.size >= maxInflight) {
          skipped++;
          continue;
        }
        sent++;
        const q = one(i);
        inflight.add(q);
        void q.finally(() => inflight.delete(q));
      }
      await sleep(5);
    }
    return Date.now();
  })();
  const progress = setInterval(() => ctx.log(`load: ${sent} sent, ${accepted.length} accepted, ${inflight.size} open, ${skipped} skipped`), 10_000);
  ctx.defer(() => clearInterval(progress));
  return {
    answers,
    accepted,
    skipped: () => skipped,
    sent: () => sent,
    async steady(timeoutMs) {
      let inARow = 0;
      try {
        return await until(async () => ((inARow = inflight.size < rate ? inARow + 1 : 0), inARow >= 8), timeoutMs, 'ingest keeping up', 250);
      } catch {
        return undefined; // a finding for the figures, not a reason to stop: the scenario says it did not
      }
    },
    async stop() {
      on = false;
      const endedAt = await loop;
      clearInterval(progress);
      while (inflight.size > 0) await Promise.allSettled([...inflight]);
      return { startedAt, endedAt };
    },
  };
}

/** Every value of a topic from its start to its current end, as the given field of its JSON (read for at most 120 s). */
async function fieldsOfTopic(brokers: string[], topic: string, field: string): Promise<string[]> {
  const kafka = new Kafka({ clientId: 'faults-reader', brokers, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const ends = await admin.fetchTopicOffsets(topic);
  await admin.disconnect();
  const remaining = new Map(ends.filter((e) => Number(e.high) > Number(e.low)).map((e) => [e.partition, Number(e.high)]));
  const out: string[] = [];
  if (remaining.size === 0) return out;
  const consumer = kafka.consumer({ groupId: `faults-reader-${randomUUID()}`, maxBytes: 50 * 1024 * 1024 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      for (const m of batch.messages) if (m.value) out.push(String(jsonOrUndefined(m.value.toString())?.[field]));
      const last = batch.messages.at(-1);
      const high = remaining.get(batch.partition);
      if (last && high !== undefined && Number(last.offset) + 1 >= high) remaining.delete(batch.partition);
      if (remaining.size === 0) done();
    },
  });
  await Promise.race([finished, sleep(120_000)]);
  await consumer.disconnect();
  return out;
}

/** What the end checks found: lost (and of those, how many the log holds), doubled, metric events against activities. */
export interface Outcome {
  caughtUpAfterLoadMs?: number;
  lost: number;
  /** Lost events whose record is in `events`: accepted and in the log, never projected (a consumer that stopped). */
  lostButInLog: number;
  doubled: number;
  activities: number;
  metricRecords: number;
  metricIds: number;
  /** Metric events delivered more than once (records beyond the first of an id). */
  metricDuplicates: number;
  /** Activities without a metric event. */
  metricMissing: number;
  storedNotAccepted: number;
}

/**
 * After the load: waits (120 s at most) for every accepted event's activity, then for the relay to publish a
 * metric event for each activity (60 s at most), and counts. Doubled: an activity twice on a timeline, or one
 * remote_id as two activities.
 */
export async function checkOutcome(ctx: Context, p: Pick<Pipeline, 'db' | 'kafka' | 'admin'>, accepted: string[], loadEndedAt: number): Promise<Outcome> {
  const missing = () => missingActivities(p.db, accepted);
  const caughtUpAt = await whenCaughtUp(missing);
  const lost = await missing();
  // Events that timed out but landed are projected too: counted once the group has read everything.
  await until(async () => (await groupLag(p.admin, projectorGroup)) === 0, 60_000, 'projector lag 0', 500).catch(() => undefined);
  const count = async (q: ReturnType<typeof sql>) => Number((await p.db.query(q))[0].n);
  const activities = await count(sql`SELECT count(*)::int AS n FROM activities`);
  // Not reaching it is a finding (metric events missing), not a failure of the run: counted below.
  await until(async () => (await metricsHigh(p.kafka.brokers)) >= activities, 60_000, 'metric events relayed', 500).catch(() => undefined);
  const metricValues = await fieldsOfTopic(p.kafka.brokers, topics.metrics, 'id');
  const ids = new Set(metricValues);
  const [activityIds] = await p.db.query(sql`SELECT array_agg(id::text) AS ids FROM activities`);
  const metricMissing = ((activityIds.ids as string[] | null) ?? []).filter((id) => !ids.has(id)).length;
  const doubled =
    (await count(sql`SELECT count(*)::int AS n FROM (SELECT activity_id FROM contact_timeline GROUP BY activity_id HAVING count(*) > 1) d`)) +
    (await count(
      sql`SELECT count(*)::int AS n FROM (SELECT remote_id FROM activities WHERE remote_id IS NOT NULL GROUP BY remote_platform, remote_id HAVING count(*) > 1) d`,
    ));
  const storedNotAccepted = await count(sql`SELECT count(*)::int AS n FROM activities WHERE NOT (id = ANY(${accepted}::uuid[]))`);
  let lostButInLog = 0;
  if (lost > 0) {
    const inLog = new Set(await fieldsOfTopic(p.kafka.brokers, topics.events, 'activity_id'));
    const [rows] = await p.db.query(
      sql`SELECT array_agg(a) AS ids FROM unnest(${accepted}::text[]) a WHERE NOT EXISTS (SELECT 1 FROM activities WHERE id = a::uuid)`,
    );
    lostButInLog = ((rows.ids as string[] | null) ?? []).filter((id) => inLog.has(id)).length;
  }
  ctx.log(`checked: ${lost} lost (${lostButInLog} of them in the log), ${doubled} doubled, ${metricValues.length} metric records for ${activities} activities`);
  return {
    caughtUpAfterLoadMs: caughtUpAt === undefined ? undefined : Math.max(0, caughtUpAt - loadEndedAt),
    lost,
    lostButInLog,
    doubled,
    activities,
    metricRecords: metricValues.length,
    metricIds: ids.size,
    metricDuplicates: metricValues.length - ids.size,
    metricMissing,
    storedNotAccepted,
  };
}

/** Records in `metrics`: the sum of its partitions' ends (nothing is deleted from it during a run). */
async function metricsHigh(brokers: string[]): Promise<number> {
  const admin = new Kafka({ clientId: 'faults-metrics-end', brokers, logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    return (await admin.fetchTopicOffsets(topics.metrics)).reduce((a, e) => a + Number(e.high), 0);
  } finally {
    await admin.disconnect();
  }
}

/** A consumer process at the end: alive (/healthz 200), ready, a member of its group holding partitions. */
export interface EndState {
  label: string;
  exited: boolean;
  healthz: number | string;
  readyz: number | string;
  partitions: number[];
  /** Alive but holding no partition of its group, or not alive at all. */
  working: boolean;
}

const statusOf = async (url: string) => {
  try {
    return (await fetch(url, { signal: AbortSignal.timeout(3_000) })).status;
  } catch (e: any) {
    return e?.name === 'TimeoutError' ? 'timeout' : 'refused';
  }
};

/**
 * Each consumer process still meant to run, at the end: its probes, and its partitions in its group's
 * description, given up to 30 s to settle a rebalance in progress.
 */
export async function endStates(admin: Admin, running: ConsumerProcess[]): Promise<EndState[]> {
  const byGroup = new Map<string, ConsumerProcess[]>();
  for (const c of running) byGroup.set(c.group.id, [...(byGroup.get(c.group.id) ?? []), c]);
  const views = new Map<string, GroupView | undefined>();
  for (const [, cs] of byGroup) {
    const r = await untilAssigned(
      admin,
      cs[0].group,
      cs.map((c) => c.label),
      30_000,
    );
    views.set(cs[0].group.id, r.last);
  }
  return Promise.all(
    running.map(async (c) => {
      const exited = c.service.process.exitCode !== null || c.service.process.signalCode !== null;
      const healthz = await statusOf(`${c.service.baseUrl}/healthz`);
      const readyz = await statusOf(`${c.service.baseUrl}/readyz`);
      const view = views.get(c.group.id);
      const partitions = view ? (memberOf(view, c.label)?.partitions ?? []) : [];
      return { label: c.label, exited, healthz, readyz, partitions, working: !exited && healthz === 200 && partitions.length > 0 };
    }),
  );
}

/** Lines of a process's log that say its consumer crashed, was expelled or was restarted (kafkajs' words, and the adapter's). */
export function consumerTroubles(c: ConsumerProcess): string[] {
  const out: string[] = [];
  let text = '';
  try {
    text = readFileSync(c.service.logFile, 'utf8');
  } catch {
    return out; // no log: nothing it said
  }
  for (const line of text.split('\n')) {
    const j = jsonOrUndefined(line);
    if (!/crash|restart|fenced|expelled/i.test(String(j?.msg ?? line))) continue;
    out.push(j ? `${new Date(Number(j.time)).toISOString().slice(11, 23)} ${j.msg ?? ''} ${j.err?.message ?? j.error ?? ''}`.trim() : line.slice(0, 200));
  }
  return out;
}

/** The first answer of this status received at or after `at`: milliseconds from `at`. */
export function firstAnswerAfter(answers: Answer[], at: number, status: string): number | undefined {
  let first: number | undefined;
  for (const a of answers) {
    const t = a.sentAt + a.ms;
    if (a.status === status && t >= at && (first === undefined || t < first)) first = t;
  }
  return first === undefined ? undefined : first - at;
}

/** A process's handled-records samples where they changed, in seconds from `from`: the raw curve, small. */
export function thin(samples: [number, number][], from: number): [number, number][] {
  return samples.filter((s, i) => i === 0 || s[1] !== samples[i - 1][1]).map(([t, n]) => [Number(((t - from) / 1000).toFixed(1)), n]);
}

/** Answers counted by status. */
export const statusCounts = (answers: Answer[]): Record<string, number> =>
  answers.reduce<Record<string, number>>((a, x) => ((a[x.status] = (a[x.status] ?? 0) + 1), a), {});

/** A duration row without a goal: seconds, or `never` without a unit. */
export const secondsRow = (measure: string, ms: number | undefined, note = ''): { measure: string; value: number | string; unit: string } => ({
  measure,
  value: ms === undefined ? 'never' : Number((ms / 1000).toFixed(1)),
  unit: `${ms === undefined ? '' : 's'}${note ? ` ${note}` : ''}`.trim(),
});

/** The rows every load of startLoad opens its table with: the rate it held, what it could not send, when ingest kept up. */
export const loadRows = (load: Load, rate: number, loadS: number, steadyMs: number | undefined): Row[] => [
  {
    measure: 'load held',
    value: `${Math.round(load.sent() / loadS)} events/s for ${Math.round(loadS)} s (asked ${rate}/s, single POSTs over ${PARTITIONS} partitions)`,
  },
  { measure: 'not sent (this process at its in-flight cap)', value: load.skipped() },
  {
    measure: 'ingest keeping up before the first fault (under a second of requests open)',
    value: sec(steadyMs),
    unit: steadyMs === undefined ? '(within 90 s)' : 's after the load started',
  },
];
