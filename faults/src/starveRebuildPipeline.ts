/**
 * What the starve and rebuild-under-load scenarios share: the pipeline as separate processes on its own
 * PostgreSQL and broker, a keyed event load (every event keyed, so a failed request is always sent again),
 * and the end-state checks (lost, doubled, a consumer group's assignment and lag, a topic's record count).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { AssignerProtocol, Kafka, logLevel, type Admin } from 'kafkajs';
import { queryRows, sql, type Db } from '@shopstream/db';
import type { KafkaHandle } from '@shopstream/testkit';
import { ownKafka } from './ownKafka.js';
import { ownPostgres, type OwnPostgres } from './ownPostgres.js';
import { randomPort, serviceEnv, startService, untilReady, type Service } from './services.js';
import type { Context } from './types.js';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface Pipeline {
  pg: OwnPostgres;
  kafka: KafkaHandle;
  admin: Admin;
  shopId: string;
  env: Record<string, string>;
  headers: Record<string, string>;
  /** The running process of each service (replaced by `restart`). */
  current: Record<string, Service>;
  /** A new process of the service on its port (the old one is left as it is: kill it first). */
  restart(name: string): Service;
}

/**
 * The services started in the order given (the first one, ingest-api, applies the migrations and creates the
 * topics the others find), each ready before the scenario goes on; all killed when it ends.
 */
export async function startPipeline(ctx: Context, names: string[], extraEnv: Record<string, string> = {}): Promise<Pipeline> {
  const pg = await ownPostgres(ctx, { poolSize: 4 });
  const kafka = await ownKafka(ctx);
  const shopId = randomUUID();
  const key = `faults_${randomBytes(24).toString('base64url')}`;
  const env = serviceEnv({ databaseUrl: pg.url, brokers: kafka.brokers, apiKeys: `${key}=${shopId}` }, extraEnv);
  const ports: Record<string, number> = {};
  const current: Record<string, Service> = {};
  const restart = (name: string) => {
    ports[name] ??= randomPort();
    current[name] = startService(ctx.repoRoot, name, ports[name], env);
    return current[name];
  };
  ctx.defer(async () => void (await Promise.allSettled(Object.values(current).map((s) => s.kill('SIGKILL')))));
  await untilReady(restart(names[0]), 120_000);
  for (const n of names.slice(1)) restart(n);
  for (const n of names.slice(1)) await untilReady(current[n], 120_000);
  const admin = new Kafka({ clientId: 'faults-admin', brokers: kafka.brokers, logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  ctx.defer(() => admin.disconnect());
  ctx.log(`${names.join(', ')} ready (pids ${names.map((n) => current[n].process.pid).join(', ')})`);
  return {
    pg,
    kafka,
    admin,
    shopId,
    env,
    headers: { authorization: `Bearer ${key}`, 'x-shop-id': shopId, 'content-type': 'application/json' },
    current,
    restart,
  };
}

/** One event the load generated: accepted when `activityId` is set. */
export interface LoadEvent {
  seq: number;
  body: {
    name: string;
    metric: { metric_name: string; value: number; additional_properties: Record<string, unknown> };
    contact?: { email: string };
    remote_id: string;
    remote_platform: string;
  };
  activityId?: string;
  contactId?: string;
}

/**
 * Keyed events (remote_id per event, so sending one again is harmless) in bulk POSTs of `bulkSize`, open loop
 * at `rate` events/s while running; a request that fails or is answered other than 200 is sent again (after
 * 200 ms, then up to 2 s apart) until its events are accepted or `giveUpMs` passes.
 */
export class EventLoad {
  readonly runTag = randomBytes(4).toString('hex');
  readonly events: LoadEvent[] = [];
  readonly statuses: Record<string, number> = {};
  requests = 0;
  gaveUp = 0;
  private running = false;
  private loop: Promise<void> | undefined;
  private readonly inflight = new Set<Promise<void>>();

  constructor(
    private readonly ctx: Context,
    private readonly ingestUrl: () => string,
    private readonly headers: Record<string, string>,
    private readonly o: { contactShare: number; contacts: number; bulkSize: number; giveUpMs?: number },
  ) {}

  get accepted(): LoadEvent[] {
    return this.events.filter((e) => e.activityId !== undefined);
  }

  private make(): LoadEvent {
    const seq = this.events.length;
    const r = this.ctx.random();
    const metricName = r < 0.5 ? 'placed_order' : r < 0.8 ? 'viewed_product' : 'clicked_link';
    const contact = this.ctx.random() < this.o.contactShare;
    const ev: LoadEvent = {
      seq,
      body: {
        name: `${metricName} #${seq}`,
        metric: { metric_name: metricName, value: seq % 200, additional_properties: { seq, run: this.runTag } },
        ...(contact ? { contact: { email: `c${Math.floor(this.ctx.random() * this.o.contacts)}@example.com` } } : {}),
        remote_id: `${this.runTag}-${seq}`,
        remote_platform: 'faults',
      },
    };
    this.events.push(ev);
    return ev;
  }

  private async send(batch: LoadEvent[]): Promise<void> {
    const t0 = Date.now();
    let pending = batch;
    for (let attempt = 0; pending.length > 0; attempt++) {
      this.requests++;
      let status = 'error';
      try {
        const res = await fetch(`${this.ingestUrl()}/v2026-04/events/bulk/`, {
          method: 'POST',
          headers: this.headers,
          body: JSON.stringify({ events: pending.map((e) => e.body) }),
          signal: AbortSignal.timeout(15_000),
        });
        status = String(res.status);
        const json: any = await res.json().catch(() => undefined);
        if (res.status === 200 && Array.isArray(json?.results)) {
          const again: LoadEvent[] = [];
          json.results.forEach((r: any, i: number) => {
            if (r.status === 'success' && typeof r.event?.activity_id === 'string') {
              pending[i].activityId = r.event.activity_id;
              pending[i].contactId = r.event.contact?.id;
            } else again.push(pending[i]);
          });
          pending = again;
        }
      } catch (e: any) {
        status = e?.name === 'TimeoutError' ? 'timeout' : String(e?.cause?.code ?? 'error');
      }
      this.statuses[status] = (this.statuses[status] ?? 0) + 1;
      if (pending.length === 0) return;
      if (Date.now() - t0 > (this.o.giveUpMs ?? 180_000)) {
        this.gaveUp += pending.length;
        return;
      }
      await sleep(Math.min(2_000, 200 * 2 ** attempt));
    }
  }

  /** Sends `n` events in bulks of `bulkSize`, `parallel` requests at a time, as fast as ingest takes them: a backlog to rebuild. */
  async preload(n: number, bulkSize = 100, parallel = 4): Promise<void> {
    const batches: LoadEvent[][] = [];
    for (let i = 0; i < n; i += bulkSize) batches.push(Array.from({ length: Math.min(bulkSize, n - i) }, () => this.make()));
    let next = 0;
    await Promise.all(
      Array.from({ length: parallel }, async () => {
        while (next < batches.length) await this.send(batches[next++]);
      }),
    );
  }

  /** Starts the open-loop load at `rate` events/s. */
  start(rate: number): void {
    this.running = true;
    const t0 = Date.now();
    let due = 0;
    this.loop = (async () => {
      while (this.running) {
        const target = Math.floor(((Date.now() - t0) / 1000) * rate);
        while (due + this.o.bulkSize <= target) {
          due += this.o.bulkSize;
          const p = this.send(Array.from({ length: this.o.bulkSize }, () => this.make()));
          this.inflight.add(p);
          void p.finally(() => this.inflight.delete(p));
        }
        await sleep(20);
      }
    })();
  }

  /** Stops generating, then waits for every request in flight (with its retries) to end. */
  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
  }
}

/** What the database holds of a load's events: lost (accepted, no activity), doubled (twice stored or twice on a timeline). */
export async function storedEvents(db: Db, shopId: string, load: EventLoad) {
  const rows = await queryRows(
    db,
    sql`SELECT id::text, (metric->'additional_properties'->>'seq')::int AS seq FROM activities
        WHERE shop_id = ${shopId} AND metric->'additional_properties'->>'run' = ${load.runTag}`,
    (r) => ({ id: String(r.id), seq: Number(r.seq) }),
  );
  const bySeq = new Map<number, number>();
  for (const r of rows) bySeq.set(r.seq, (bySeq.get(r.seq) ?? 0) + 1);
  const accepted = load.accepted;
  const lost = accepted.filter((e) => !bySeq.has(e.seq)).length;
  const doubledActivities = [...bySeq.values()].filter((n) => n > 1).length;
  const [tl] = await db.query(sql`
    SELECT count(*)::int AS n FROM (SELECT activity_id FROM contact_timeline WHERE shop_id = ${shopId} GROUP BY activity_id HAVING count(*) > 1) d`);
  return {
    accepted: accepted.length,
    stored: rows.length,
    lost,
    doubled: doubledActivities + Number(tl.n),
    lostSample: accepted.filter((e) => !bySeq.has(e.seq)).slice(0, 10),
  };
}

/** How many of these activity ids have no row yet (in the shop). */
export async function missingOf(db: Db, shopId: string, ids: string[]): Promise<number> {
  const [r] = await db.query(sql`SELECT count(*)::int AS n FROM activities WHERE shop_id = ${shopId} AND id = ANY(${ids}::uuid[])`);
  return ids.length - Number(r.n);
}

/** The records a topic holds (high minus low watermark, summed over its partitions). */
export async function topicRecords(admin: Admin, topic: string): Promise<number> {
  return (await admin.fetchTopicOffsets(topic)).reduce((n, p) => n + Number(p.high) - Number(p.low), 0);
}

/** When a group last wrote a checkpoint (epoch ms; 0 for never). */
export async function lastCheckpoint(db: Db, group: string): Promise<number> {
  const [r] = await db.query(sql`SELECT (extract(epoch FROM max(updated_at)) * 1000)::float8 AS t FROM projection_offsets WHERE group_id = ${group}`);
  return Number(r?.t ?? 0);
}

/** Records of the topic not yet applied by the group (its checkpoints in projection_offsets against the log's ends). */
export async function lagOf(admin: Admin, db: Db, group: string, topic: string): Promise<number> {
  const ends = await admin.fetchTopicOffsets(topic);
  const rows = await db.query(sql`SELECT partition, next_offset::text FROM projection_offsets WHERE group_id = ${group} AND topic = ${topic}`);
  const at = new Map(rows.map((r) => [Number(r.partition), Number(r.next_offset)]));
  return ends.reduce((n, e) => n + Math.max(0, Number(e.high) - (at.get(e.partition) ?? Number(e.low))), 0);
}

/** The group as the broker sees it: its state, its members, and how many of the topic's partitions are assigned. */
export async function groupAssignment(admin: Admin, group: string, topic: string) {
  const partitions = (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions.length;
  const { groups } = await admin.describeGroups([group]);
  const g = groups[0];
  const assigned = new Set<number>();
  for (const m of g?.members ?? []) {
    if (!m.memberAssignment || m.memberAssignment.length === 0) continue;
    const a = AssignerProtocol.MemberAssignment.decode(m.memberAssignment);
    for (const p of a?.assignment[topic] ?? []) assigned.add(p);
  }
  return { state: g?.state ?? 'unknown', members: g?.members.length ?? 0, assigned: assigned.size, partitions };
}

/** GET /healthz of a service: its status, or what kept it from answering. */
export async function healthz(s: Service): Promise<string> {
  try {
    return String((await fetch(`${s.baseUrl}/healthz`, { signal: AbortSignal.timeout(3_000) })).status);
  } catch (e: any) {
    return e?.name === 'TimeoutError' ? 'timeout' : String(e?.cause?.code ?? 'error');
  }
}
