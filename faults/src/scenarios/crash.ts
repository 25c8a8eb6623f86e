import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Kafka, logLevel } from 'kafkajs';
import { headers as H, schemas, topics } from '@shopstream/contracts';
import { queryRows, sql, type Db } from '@shopstream/db';
import { ownKafka } from '../ownKafka.js';
import { fromSource, randomPort, serviceEnv, startService, until, untilReady, type Service } from '../services.js';
import type { Context, Figures, Scenario } from '../types.js';
import { ownPostgres } from '../ownPostgres.js';
import { byStatus, noneRow, sec, serverErrorsRow } from '../scenarioFigures.js';

const KILLED = ['ingest-api', 'activity-projector', 'flow-matcher', 'conversation-projector'] as const;
type Killed = (typeof KILLED)[number];
const GROUP: Record<Exclude<Killed, 'ingest-api'>, string> = {
  'activity-projector': 'shopstream.activity-projector',
  'flow-matcher': 'shopstream.flow-matcher',
  'conversation-projector': 'shopstream.conversation-projector',
};
const SOURCE: Record<Exclude<Killed, 'ingest-api'>, string> = {
  'activity-projector': topics.events,
  'flow-matcher': topics.metrics,
  'conversation-projector': topics.conversations,
};

/** What the harness knows of one event it generated: its shape, the flows it must trigger, and its answer. */
interface Sent {
  keyed: boolean;
  contact: boolean;
  /** Indexes into `flows` of the flows this event matches. */
  flows: number[];
  body: Record<string, unknown>;
  activityId?: string;
  contactId?: string;
  /** Unkeyed, the request failed after it may have reached ingest: not retried (it could land twice), not accepted. */
  abandoned?: boolean;
}

type Outcome = { kind: 'answer'; status: number; json: any; retryAfter: string | null } | { kind: 'error'; code: string };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => {
  if (xs.length === 0) return undefined;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)];
};

/**
 * How long this machine takes, right now, only to load a service's code as the services start (node, the
 * imports; and tsx with FAULTS_FROM_SOURCE=1), without connecting to anything: the floor under every restart time.
 */
function codeLoadMs(repoRoot: string, name: string): Promise<number | undefined> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      fromSource
        ? [
            '--conditions=@shopstream/source',
            '--import',
            'tsx',
            '-e',
            `import('./services/${name}/src/index.ts').then(() => process.exit(0), () => process.exit(1))`,
          ]
        : ['--input-type=module', '-e', `import('./services/${name}/dist/index.js').then(() => process.exit(0), () => process.exit(1))`],
      { cwd: repoRoot, stdio: 'ignore' },
    );
    child.once('exit', (code) => resolve(code === 0 ? Date.now() - t0 : undefined));
    child.once('error', () => resolve(undefined));
  });
}

/** Reads a whole topic from its beginning to its current end: every value, parsed. */
async function readTopic(brokers: string[], topic: string): Promise<any[]> {
  const kafka = new Kafka({ clientId: 'faults-reader', brokers, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const ends = await admin.fetchTopicOffsets(topic);
  await admin.disconnect();
  const remaining = new Map(ends.filter((e) => Number(e.high) > Number(e.low)).map((e) => [e.partition, Number(e.high)]));
  const out: any[] = [];
  if (remaining.size === 0) return out;
  const consumer = kafka.consumer({ groupId: `faults-reader-${randomUUID()}`, maxBytes: 50 * 1024 * 1024 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      for (const m of batch.messages) if (m.value) out.push(JSON.parse(m.value.toString()));
      const last = batch.messages.at(-1);
      const high = remaining.get(batch.partition);
      if (last && high !== undefined && Number(last.offset) + 1 >= high) remaining.delete(batch.partition);
      if (remaining.size === 0) done();
    },
  });
  await Promise.race([finished, sleep(300_000)]);
  await consumer.disconnect();
  return out;
}

/**
 * Every service killed -9 at random moments under a steady mixed load, and restarted at once on the same port.
 * Its own PostgreSQL (the embedded mode's engine in a temporary directory) and its own broker; ingest-api,
 * activity-projector, flow-matcher, conversation-projector and query-api as separate processes (query-api, which
 * serves the flows and the export, is not killed); the load from this process: single and bulk events (keyed
 * and unkeyed, with and without a contact, matching flows or not) over HTTP, and conversation records published
 * to the conversations topic (the service takes conversations from there: `pnpm cli conversations import`).
 *
 * Afterwards, against the database and the topics: every accepted event one Activity, on its contact's timeline
 * once (none without a contact), its metric event at least once and always with one id, one trigger per
 * (flow, metric event) for exactly the flows it matches; every conversation once in the export, with its messages.
 */
export const crash: Scenario = {
  name: 'crash',
  description:
    'each service killed -9 at random moments under mixed load and restarted: nothing accepted lost or doubled, ingest back ≤ 5 s, projectors ≤ 10 s',
  async run(ctx: Context): Promise<Figures> {
    const { killsPerService, slotMs, totalEvents, totalConversations, leadMs, tailMs } = ctx.sized({
      killsPerService: [3, 20],
      slotMs: [5_000, 7_500], // one kill per slot, at a random moment in its first half
      totalEvents: [8_000, 105_000],
      totalConversations: [200, 2_000],
      leadMs: [4_000, 8_000], // load before the first slot
      tailMs: [8_000, 15_000], // load after the last slot (the last restarts recover under load)
    });
    const loadMs = leadMs + slotMs * killsPerService * KILLED.length + tailMs;
    const rate = totalEvents / (loadMs / 1000);
    const convRate = totalConversations / (loadMs / 1000);
    const singleShare = 0.1;

    const pg = await ownPostgres(ctx, { poolSize: 4 });
    const owner: Db = pg.db;
    const pgVersion = pg.version;
    const kafka = await ownKafka(ctx);

    const shopId = randomUUID();
    const key = `faults_${randomBytes(24).toString('base64url')}`;
    const env = serviceEnv({ databaseUrl: pg.url, brokers: kafka.brokers, apiKeys: `${key}=${shopId}` });
    const ports: Record<string, number> = {};
    const current: Record<string, Service> = {};
    const start = (name: string) => {
      ports[name] ??= randomPort();
      // The projectors log at info: the line that ends openRuntime dates the end of their boot in the log file.
      current[name] = startService(ctx.repoRoot, name, ports[name], name in GROUP ? { ...env, LOG_LEVEL: 'info' } : env);
      return current[name];
    };
    ctx.defer(async () => {
      await Promise.allSettled(Object.values(current).map((s) => s.kill()));
    });
    // ingest-api first: it creates the topics and applies the migrations the others then find.
    await untilReady(start('ingest-api'), 120_000);
    for (const n of ['query-api', 'activity-projector', 'flow-matcher', 'conversation-projector']) start(n);
    for (const s of Object.values(current)) await untilReady(s, 120_000);
    const ingestUrl = () => current['ingest-api'].baseUrl;
    const queryUrl = current['query-api'].baseUrl;
    const auth = { authorization: `Bearer ${key}`, 'x-shop-id': shopId };
    const headers = { ...auth, 'content-type': 'application/json' };

    // The flows, created first through the flows API. The harness knows which of them each event must trigger.
    const flowDefs = [
      { name: 'big orders', trigger: { metric_name: 'placed_order', property_conditions: [{ field: 'total', op: 'gt', value: 100 }] } },
      { name: 'orders from known contacts', trigger: { metric_name: 'placed_order', contact_conditions: [{ field: 'email', op: 'exists' }] } },
      { name: 'any product view', trigger: { metric_name: 'viewed_product' } },
      { name: 'gold tier views', trigger: { metric_name: 'viewed_product', property_conditions: [{ field: 'tier', op: 'eq', value: 'gold' }] } },
    ];
    const flows: string[] = [];
    for (const f of flowDefs) {
      const res = await fetch(`${queryUrl}/v2026-04/flows/`, { method: 'POST', headers, body: JSON.stringify(f) });
      const json: any = await res.json();
      if (res.status !== 201 && res.status !== 200) throw new Error(`creating flow "${f.name}": ${res.status} ${JSON.stringify(json)}`);
      flows.push(json.id);
    }
    // The matcher reloads its flows every FLOW_REFRESH_MS (2 s) and before a batch newer than its index.
    await sleep(2_500);
    ctx.log(
      `services ready, ${flows.length} flows created; load starts: ${rate.toFixed(0)} events/s for ${loadMs / 1000} s, ${killsPerService} kills per service`,
    );

    // ---- the event load ----
    const runTag = randomBytes(4).toString('hex');
    const sent: Sent[] = [];
    const statuses: Record<string, number> = {};
    const count = (s: string) => (statuses[s] = (statuses[s] ?? 0) + 1);
    let requests = 0;
    let retries = 0;
    let notAcceptedGaveUp = 0;
    let badAnswers = 0; // 2xx with a body that does not say what was accepted
    const makeEvent = (forceKeyed = false): number => {
      const seq = sent.length;
      const r = ctx.random();
      const metricName = r < 0.4 ? 'placed_order' : r < 0.7 ? 'viewed_product' : 'clicked_link';
      const total = Math.floor(ctx.random() * 200);
      const tier = ctx.random() < 0.3 ? 'gold' : 'silver';
      const contact = ctx.random() < 0.5;
      const keyed = forceKeyed || ctx.random() < 0.5;
      const body: Record<string, unknown> = {
        name: `${metricName} #${seq}`,
        metric: { metric_name: metricName, value: total, additional_properties: { seq, run: runTag, total, tier } },
        ...(contact ? { contact: { email: `c${Math.floor(ctx.random() * 2_000)}@example.com` } } : {}),
        ...(keyed ? { remote_id: `${runTag}-${seq}`, remote_platform: 'faults' } : {}),
      };
      const expected: number[] = [];
      if (metricName === 'placed_order') {
        if (total > 100) expected.push(0);
        if (contact) expected.push(1);
      } else if (metricName === 'viewed_product') {
        expected.push(2);
        if (tier === 'gold') expected.push(3);
      }
      sent.push({ keyed, contact, flows: expected, body });
      return seq;
    };

    const post = async (url: string, body: unknown): Promise<Outcome> => {
      requests++;
      try {
        const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.timeout(15_000) });
        const text = await res.text();
        let json: any;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        count(String(res.status));
        return { kind: 'answer', status: res.status, json, retryAfter: res.headers.get('retry-after') };
      } catch (e: any) {
        const code = e?.name === 'TimeoutError' ? 'timeout' : String(e?.cause?.code ?? e?.code ?? e?.name ?? 'error');
        const kind = code === 'ECONNREFUSED' ? 'refused' : code === 'timeout' ? 'timeout' : 'connection lost';
        count(kind);
        return { kind: 'error', code: kind };
      }
    };
    /** Whether the request surely did not reach ingest (so even an unkeyed event can be sent again). */
    const surelyNotRecorded = (o: Outcome) => (o.kind === 'error' && o.code === 'refused') || (o.kind === 'answer' && o.status === 503);
    const accept = (seq: number, ev: any) => {
      if (typeof ev?.activity_id !== 'string') {
        badAnswers++;
        return;
      }
      sent[seq].activityId = ev.activity_id;
      sent[seq].contactId = ev.contact?.id;
    };
    const giveUpAfterMs = 180_000;

    const sendSingle = async (seq: number): Promise<boolean> => {
      const t0 = Date.now();
      for (let attempt = 0; ; attempt++) {
        const o = await post(`${ingestUrl()}/v2026-04/events/`, sent[seq].body);
        if (o.kind === 'answer' && o.status === 202) {
          accept(seq, o.json);
          return true;
        }
        if (o.kind === 'answer' && o.status >= 400 && o.status < 500) return false; // not expected: counted by status
        if (!sent[seq].keyed && !surelyNotRecorded(o)) {
          sent[seq].abandoned = true;
          return false;
        }
        if (Date.now() - t0 > giveUpAfterMs) {
          notAcceptedGaveUp++;
          return false;
        }
        retries++;
        await sleep(Math.min(1_000, 100 * 2 ** attempt));
      }
    };

    const sendBulk = async (seqs: number[]): Promise<void> => {
      const t0 = Date.now();
      let pending = seqs;
      for (let attempt = 0; pending.length > 0; attempt++) {
        const o = await post(`${ingestUrl()}/v2026-04/events/bulk/`, { events: pending.map((s) => sent[s].body) });
        if (o.kind === 'answer' && o.status === 200 && Array.isArray(o.json?.results)) {
          const again: number[] = [];
          o.json.results.forEach((r: any, i: number) => {
            if (r.status === 'success') accept(pending[i], r.event);
            else {
              count(`bulk item error ${r.error?.code}`);
              if (r.error?.code !== 'validation_error') again.push(pending[i]);
            }
          });
          pending = again;
        } else if (o.kind === 'answer' && o.status >= 400 && o.status < 500) {
          return;
        } else if (!surelyNotRecorded(o)) {
          // Unanswered: the keyed items are sent again (a replay is harmless), the unkeyed ones are not.
          for (const s of pending) if (!sent[s].keyed) sent[s].abandoned = true;
          pending = pending.filter((s) => sent[s].keyed);
        }
        if (pending.length === 0) return;
        if (Date.now() - t0 > giveUpAfterMs) {
          notAcceptedGaveUp += pending.length;
          return;
        }
        retries++;
        await sleep(Math.min(1_000, 100 * 2 ** attempt));
      }
    };

    // ---- the conversation load: records on the conversations topic, as `pnpm cli conversations import` sends them ----
    const producer = new Kafka({ clientId: 'faults-conversations', brokers: kafka.brokers, logLevel: logLevel.NOTHING }).producer();
    await producer.connect();
    ctx.defer(() => producer.disconnect());
    const conversations = new Map<string, { messages: Set<string>; published: boolean }>();
    let convPublishFailures = 0;
    const convBase = Date.now() - 3_600_000;
    const convRecord = (value: object) => ({
      key: shopId,
      value: JSON.stringify(value),
      headers: { [H.contentType]: 'application/json', [H.schema]: schemas.conversationRecord, [H.shopId]: shopId },
    });
    const publishConversation = async (n: number) => {
      const id = randomUUID();
      const created = new Date(convBase + n * 200).toISOString();
      const conv = {
        id,
        agent_id: randomUUID(),
        contact_id: randomUUID(),
        user_id: null,
        created_at: created,
        updated_at: created,
        flags: [],
        tags: ['faults', runTag],
        intent: {},
        topic: {},
        title: `conversation ${n}`,
        type: 'web_chat',
        status: 'open',
      };
      const messages = Array.from({ length: 1 + Math.floor(ctx.random() * 3) }, (_, i) => ({
        id: randomUUID(),
        created_at: new Date(convBase + n * 200 + (i + 1) * 10).toISOString(),
        text: `message ${i} of ${n}`,
      }));
      const records = [
        convRecord({ type: 'conversation.upserted', shop_id: shopId, conversation: conv }),
        ...messages.map((m) => convRecord({ type: 'message.created', shop_id: shopId, conversation_id: id, message: m })),
      ];
      if (ctx.random() < 0.3) {
        const later = new Date(convBase + n * 200 + 100).toISOString();
        records.push(
          convRecord({
            type: 'conversation.upserted',
            shop_id: shopId,
            conversation: { ...conv, updated_at: later, status: 'pending', resolution: 'soft', resolved_at: later },
          }),
        );
      }
      try {
        await producer.send({ topic: topics.conversations, acks: -1, messages: records });
        conversations.set(id, { messages: new Set(messages.map((m) => m.id)), published: true });
      } catch {
        convPublishFailures++;
      }
    };

    const codeLoads: { atS: number; ms: number | undefined }[] = [];
    const probeCodeLoad = async () => {
      const atS = Number(((Date.now() - loadStart) / 1000).toFixed(1));
      codeLoads.push({ atS, ms: await codeLoadMs(ctx.repoRoot, 'ingest-api') });
    };
    const inflight = new Set<Promise<unknown>>();
    const track = (p: Promise<unknown>) => {
      inflight.add(p);
      void p.finally(() => inflight.delete(p));
    };
    let loadOn = true;
    let singles = 0;
    let bulks = 0;
    let convSent = 0;
    const loadStart = Date.now();
    const load = (async () => {
      while (loadOn) {
        const elapsed = (Date.now() - loadStart) / 1000;
        const due = Math.floor(elapsed * rate); // held until the last restart recovered: at least totalEvents
        while (sent.length < due) {
          if (ctx.random() < singleShare) {
            singles++;
            track(sendSingle(makeEvent()));
          } else {
            const n = 1 + Math.floor(ctx.random() * 100);
            const seqs = Array.from({ length: n }, () => makeEvent());
            bulks++;
            track(sendBulk(seqs));
          }
        }
        const convDue = Math.floor(elapsed * convRate);
        while (convSent < convDue) track(publishConversation(convSent++));
        await sleep(10);
      }
    })();

    const codeLoadProbes = Promise.all([probeCodeLoad(), sleep(loadMs / 2).then(probeCodeLoad)]);
    // ---- the kills: one per slot, the services in a seeded random order, each `kill -9` then started again ----
    const order: Killed[] = KILLED.flatMap((s) => Array.from({ length: killsPerService }, () => s));
    for (let i = order.length - 1; i > 0; i--) {
      const j = Math.floor(ctx.random() * (i + 1));
      [order[i], order[j]] = [order[j], order[i]];
    }
    const plan = order.map((service, i) => ({ service, atMs: leadMs + i * slotMs + Math.floor(ctx.random() * slotMs * 0.5) }));
    interface Kill {
      service: Killed;
      atS: number;
      /** How long the kill waited for the service's previous restart to recover (so each restart is measured alone). */
      deferredMs: number;
      /** From the new process's spawn to its first 2xx (ingest) or its first checkpoint written (a projector). */
      recoveredMs?: number;
      /** A projector: by its first checkpoint, or joined with nothing to read (its upstream down too). */
      recoveredBy?: string;
      /** From the spawn to the end of openRuntime (imports, migrations, topics, keys; projectors only, from their log). */
      bootedMs?: number;
      /** From the spawn to the first 200 of /healthz (a projector listens once its consumer has joined its group). */
      listeningMs?: number;
      pid?: number;
      newPid?: number;
      logFile?: string;
      spawnedAt?: number;
    }
    const kills: Kill[] = [];
    const recoveries: Promise<void>[] = [];
    const lastCheckpoint = async (group: string): Promise<number> => {
      const [r] = await owner.query(sql`SELECT (extract(epoch FROM max(updated_at)) * 1000)::float8 AS t FROM projection_offsets WHERE group_id = ${group}`);
      return Number(r?.t ?? 0);
    };
    const recoverIngest = async (k: Kill, spawnedAt: number, svc: Service) => {
      // A keyed event every 100 ms until one is answered 202: part of the stream (sent again until accepted).
      for (;;) {
        if (Date.now() - spawnedAt > 120_000 || svc !== current['ingest-api']) return;
        const seq = makeEvent(true);
        const o = await post(`${svc.baseUrl}/v2026-04/events/`, sent[seq].body);
        if (o.kind === 'answer' && o.status === 202) {
          k.recoveredMs = Date.now() - spawnedAt;
          accept(seq, o.json);
          return;
        }
        track(sendSingle(seq)); // sent again by the load's own retries until accepted
        await sleep(100);
      }
    };
    const admin = new Kafka({ clientId: 'faults-offsets', brokers: kafka.brokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    ctx.defer(() => admin.disconnect());
    /** Whether the group's checkpoints stand at the end of every partition of its topic: nothing to read. */
    const atEnd = async (group: string, topic: string) => {
      const ends = await admin.fetchTopicOffsets(topic);
      const rows = await owner.query(sql`SELECT partition, next_offset::text FROM projection_offsets WHERE group_id = ${group} AND topic = ${topic}`);
      const at = new Map(rows.map((r) => [Number(r.partition), Number(r.next_offset)]));
      return ends.every((e) => Number(e.high) <= (at.get(e.partition) ?? Number(e.low)));
    };
    /**
     * Processing again: the new process wrote its first checkpoint, or (its upstream down too, say) it has joined
     * its group (it listens only then) with nothing to read. until() counts from its own start, the spawn give
     * or take a millisecond.
     */
    const recoverProjector = async (k: Kill, spawnedAt: number) => {
      const name = k.service as Exclude<Killed, 'ingest-api'>;
      try {
        k.recoveredMs = await until(
          async () => {
            if ((await lastCheckpoint(GROUP[name])) > spawnedAt) return ((k.recoveredBy = 'checkpoint'), true);
            if (k.listeningMs !== undefined && (await atEnd(GROUP[name], SOURCE[name]))) return ((k.recoveredBy = 'joined, nothing to read'), true);
            return false;
          },
          120_000,
          `${k.service} processing`,
          100,
        );
      } catch {
        k.recoveredMs = undefined;
      }
    };
    const listening = async (k: Kill, spawnedAt: number, svc: Service) => {
      try {
        k.listeningMs = await until(async () => (await fetch(`${svc.baseUrl}/healthz`, { signal: AbortSignal.timeout(1_000) })).ok, 120_000, 'listening', 100);
      } catch {
        k.listeningMs = undefined;
      }
    };
    const recovering = new Map<Killed, Promise<unknown>>();
    for (const p of plan) {
      const wait = loadStart + p.atMs - Date.now();
      if (wait > 0) await sleep(wait);
      // A service killed again before its last restart recovered would leave that restart unmeasured: wait for it.
      const t = Date.now();
      await recovering.get(p.service);
      const old = current[p.service];
      const k: Kill = { service: p.service, atS: Number(((Date.now() - loadStart) / 1000).toFixed(1)), deferredMs: Date.now() - t, pid: old.process.pid };
      await old.kill('SIGKILL');
      const spawnedAt = Date.now();
      const svc = start(p.service);
      Object.assign(k, { newPid: svc.process.pid, logFile: svc.logFile, spawnedAt });
      kills.push(k);
      ctx.log(
        `killed ${p.service} (pid ${k.pid}) at ${k.atS} s${k.deferredMs > 100 ? ` (${sec(k.deferredMs)} s late)` : ''}; started again as pid ${svc.process.pid}`,
      );
      const r = Promise.all([p.service === 'ingest-api' ? recoverIngest(k, spawnedAt, svc) : recoverProjector(k, spawnedAt), listening(k, spawnedAt, svc)]);
      recovering.set(p.service, r);
      recoveries.push(r.then(() => undefined));
    }
    const remaining = loadStart + loadMs - Date.now();
    if (remaining > 0) await sleep(remaining);
    // The last restarts recover under load too (a projector with nothing to read would never write a checkpoint).
    await Promise.allSettled(recoveries);
    loadOn = false;
    await load;
    const loadEnd = Date.now();
    while (inflight.size > 0) await Promise.allSettled([...inflight]);
    await Promise.allSettled(recoveries);
    await codeLoadProbes;
    await producer.disconnect().catch(() => {});
    const accepted = sent.map((s, seq) => ({ ...s, seq })).filter((s) => s.activityId !== undefined);
    ctx.log(`load stopped: ${sent.length} events generated, ${accepted.length} accepted, ${conversations.size} conversations published`);

    // ---- caught up: every accepted event an activity, every expected trigger, every conversation and message ----
    const acceptedIds = accepted.map((s) => s.activityId!);
    const expectedTriggers = accepted.reduce((n, s) => n + s.flows.length, 0);
    const convIds = [...conversations.keys()];
    const messageCount = [...conversations.values()].reduce((n, c) => n + c.messages.size, 0);
    const progress = async () => {
      const [a] = await owner.query(sql`SELECT count(*)::int AS n FROM activities WHERE shop_id = ${shopId} AND id = ANY(${acceptedIds}::uuid[])`);
      const [t] = await owner.query(sql`SELECT count(*)::int AS n FROM flow_triggers WHERE shop_id = ${shopId} AND activity_id = ANY(${acceptedIds}::uuid[])`);
      const [c] = await owner.query(sql`SELECT count(*)::int AS n FROM conversations WHERE shop_id = ${shopId} AND id = ANY(${convIds}::uuid[])`);
      const [m] = await owner.query(
        sql`SELECT count(*)::int AS n FROM conversation_messages WHERE shop_id = ${shopId} AND conversation_id = ANY(${convIds}::uuid[])`,
      );
      return { activities: Number(a.n), triggers: Number(t.n), conversations: Number(c.n), messages: Number(m.n) };
    };
    let caughtUpMs: number | undefined;
    try {
      await until(
        async () => {
          const p = await progress();
          return p.activities >= acceptedIds.length && p.triggers >= expectedTriggers && p.conversations >= convIds.length && p.messages >= messageCount;
        },
        300_000,
        'projections caught up',
        500,
      );
      caughtUpMs = Date.now() - loadEnd;
    } catch {
      caughtUpMs = undefined;
      ctx.log(`not caught up after 300 s: ${JSON.stringify(await progress())}`);
    }
    ctx.log(`caught up ${sec(caughtUpMs)} s after the load; checking`);
    // The relays publish what the projectors emitted a moment after their commit: let the topics settle.
    await sleep(3_000);

    // ---- the checks ----
    const textOrNull = (v: unknown) => (v === null ? null : String(v));
    const activityRows = await queryRows(
      owner,
      sql`
      SELECT id::text, (metric->'additional_properties'->>'seq')::int AS seq, contact_id::text FROM activities
      WHERE shop_id = ${shopId} AND metric->'additional_properties'->>'run' = ${runTag}`,
      (r) => ({ id: String(r.id), seq: Number(r.seq), contact_id: textOrNull(r.contact_id) }),
    );
    const bySeq = new Map<number, { id: string; contact_id: string | null }[]>();
    for (const r of activityRows) {
      const l = bySeq.get(r.seq) ?? [];
      l.push({ id: r.id, contact_id: r.contact_id });
      bySeq.set(r.seq, l);
    }
    const timelineRows = await queryRows(owner, sql`SELECT activity_id::text, contact_id::text FROM contact_timeline WHERE shop_id = ${shopId}`, (r) => ({
      activity_id: String(r.activity_id),
      contact_id: String(r.contact_id),
    }));
    const timeline = new Map<string, string[]>();
    for (const r of timelineRows) timeline.set(r.activity_id, [...(timeline.get(r.activity_id) ?? []), r.contact_id]);
    const triggerRows = await queryRows(
      owner,
      sql`SELECT flow_id::text, metric_event_id::text, activity_id::text FROM flow_triggers WHERE shop_id = ${shopId}`,
      (r) => ({
        flow_id: String(r.flow_id),
        metric_event_id: String(r.metric_event_id),
        activity_id: String(r.activity_id),
      }),
    );
    const triggersOf = new Map<string, string[]>();
    const triggerKeys = new Map<string, number>();
    for (const r of triggerRows) {
      triggersOf.set(r.activity_id, [...(triggersOf.get(r.activity_id) ?? []), r.flow_id]);
      const k = `${r.flow_id}/${r.metric_event_id}`;
      triggerKeys.set(k, (triggerKeys.get(k) ?? 0) + 1);
    }
    const metricValues = await readTopic(kafka.brokers, topics.metrics);
    const metricIds = new Map<string, Set<string>>();
    let metricDeliveries = 0;
    for (const m of metricValues) {
      if (m.shop_id !== shopId) continue;
      metricDeliveries++;
      const s = metricIds.get(m.activity_id) ?? new Set<string>();
      s.add(m.id);
      metricIds.set(m.activity_id, s);
    }
    const triggerValues = await readTopic(kafka.brokers, topics.flowTriggers);
    const triggerRecordIds = new Map<string, Set<string>>();
    for (const t of triggerValues) {
      const k = `${t.flow_id}/${t.metric_event_id}`;
      const s = triggerRecordIds.get(k) ?? new Set<string>();
      s.add(t.id);
      triggerRecordIds.set(k, s);
    }

    let lost = 0; // accepted, no activity
    let doubled = 0; // an event stored more than once, or on a timeline twice
    let wrongId = 0; // the activity stored under another id than the one answered
    let timelineMissing = 0;
    let timelineWrong = 0; // on a timeline without a contact, or on another contact's
    let metricMissing = 0;
    let metricTwoIds = 0;
    let triggersMissing = 0;
    let triggersUnexpected = 0;
    const samples: Record<string, unknown[]> = {};
    const sample = (what: string, x: unknown) => ((samples[what] ??= []).length < 10 ? samples[what].push(x) : undefined);
    for (const s of accepted) {
      const rows = bySeq.get(s.seq) ?? [];
      if (rows.length === 0) {
        lost++;
        sample('lost', { seq: s.seq, activityId: s.activityId, keyed: s.keyed });
        continue;
      }
      if (rows.length > 1) {
        doubled++;
        sample('doubled', { seq: s.seq, ids: rows.map((r) => r.id) });
      }
      if (!rows.some((r) => r.id === s.activityId)) {
        wrongId++;
        sample('wrongId', { seq: s.seq, answered: s.activityId, stored: rows.map((r) => r.id) });
      }
      const tl = timeline.get(s.activityId!) ?? [];
      if (s.contact) {
        if (tl.length === 0) timelineMissing++;
        else if (tl.length > 1) {
          doubled++;
          sample('timelineDoubled', { seq: s.seq, tl });
        } else if (tl[0] !== s.contactId) timelineWrong++;
      } else if (tl.length > 0) timelineWrong++;
      const mids = metricIds.get(s.activityId!);
      if (!mids) {
        metricMissing++;
        sample('metricMissing', { seq: s.seq, activityId: s.activityId });
      } else if (mids.size > 1 || !mids.has(s.activityId!)) {
        metricTwoIds++;
        sample('metricTwoIds', { seq: s.seq, ids: [...mids] });
      }
      const got = triggersOf.get(s.activityId!) ?? [];
      const want = s.flows.map((i) => flows[i]);
      for (const f of want) if (!got.includes(f)) triggersMissing++;
      for (const f of got) if (!want.includes(f)) triggersUnexpected++;
    }
    // Events not accepted (unkeyed, unanswered) may have landed: allowed, but never twice.
    let storedNotAccepted = 0;
    for (const [seq, rows] of bySeq) {
      if (sent[seq]?.activityId !== undefined) continue;
      storedNotAccepted++;
      if (rows.length > 1) doubled++;
    }
    const duplicateTriggersDb = [...triggerKeys.values()].filter((n) => n > 1).length;
    const duplicateTriggersTopic = [...triggerRecordIds.values()].filter((s) => s.size > 1).length;
    const duplicateTriggers = duplicateTriggersDb + duplicateTriggersTopic;

    // Every conversation exportable once, with its messages: the whole window, page by page.
    const seen = new Map<string, number>();
    let exportPages = 0;
    let messagesWrong = 0;
    let exportFailure: string | undefined;
    const range = `${new Date(convBase - 60_000).toISOString()},${new Date(convBase + convSent * 200 + 60_000).toISOString()}`;
    let next: string | null = `${queryUrl}/v2026-04/conversations/export/?limit=100&created_at__range=${encodeURIComponent(range)}`;
    while (next) {
      const res = await fetch(next, { headers: auth });
      exportPages++;
      if (res.status === 429) {
        await sleep(1_000 * Number(res.headers.get('retry-after') ?? 1));
        continue;
      }
      const page: any = await res.json();
      if (res.status !== 200) {
        exportFailure = `${res.status} ${JSON.stringify(page).slice(0, 300)}`;
        break;
      }
      for (const c of page.results) {
        seen.set(c.id, (seen.get(c.id) ?? 0) + 1);
        const want = conversations.get(c.id);
        if (want) {
          const got = new Set<string>(c.messages.map((m: any) => m.id));
          if (got.size !== want.messages.size || [...want.messages].some((m) => !got.has(m)) || c.messages.length !== got.size) messagesWrong++;
        }
      }
      next = page.next;
    }
    const convMissing = convIds.filter((id) => !seen.has(id)).length;
    const convTwice = [...seen.values()].filter((n) => n > 1).length;

    // Each projector restart's boot: the end of openRuntime, dated in its log ("bootstrap API keys ensured").
    for (const k of kills) {
      if (k.service === 'ingest-api' || !k.logFile || !k.spawnedAt) continue;
      try {
        for (const line of readFileSync(k.logFile, 'utf8').split('\n')) {
          if (!line.includes('bootstrap API keys ensured')) continue;
          const t = Number(JSON.parse(line).time);
          if (Number.isFinite(t)) k.bootedMs = t - k.spawnedAt;
          break;
        }
      } catch {
        // no log: no boot time
      }
    }
    const med = (xs: (number | undefined)[]) => sec(median(xs.filter((x): x is number => x !== undefined)));
    const breakdown = (n: Killed) => {
      const ks = kills.filter((k) => k.service === n);
      return n === 'ingest-api'
        ? `listening ${med(ks.map((k) => k.listeningMs))} s, first 202 ${med(ks.map((k) => k.recoveredMs))} s`
        : `booted ${med(ks.map((k) => k.bootedMs))} s, group joined and listening ${med(ks.map((k) => k.listeningMs))} s, processing ${med(ks.map((k) => k.recoveredMs))} s` +
            ` (${ks.filter((k) => k.recoveredBy === 'checkpoint').length} by a checkpoint, ${ks.filter((k) => k.recoveredBy !== undefined && k.recoveredBy !== 'checkpoint').length} joined with nothing to read)`;
    };
    const ingestBack = kills.filter((k) => k.service === 'ingest-api').map((k) => k.recoveredMs);
    const ingestBackMs = ingestBack.filter((x): x is number => x !== undefined);
    const projectorBack = (n: Killed) => kills.filter((k) => k.service === n).map((k) => k.recoveredMs);
    const projectorRows = (['activity-projector', 'flow-matcher', 'conversation-projector'] as const).map((n) => {
      const xs = projectorBack(n);
      const ok = xs.filter((x): x is number => x !== undefined);
      const max = ok.length === xs.length && ok.length > 0 ? Math.max(...ok) : undefined;
      return {
        measure: `${n} processing again after a restart (max, median)`,
        value: `${sec(max)} s, ${sec(median(ok))} s`,
        goal: { text: '≤ 10 s from process start', met: max !== undefined && max <= 10_000 },
      };
    });
    const ingestMax = ingestBackMs.length === ingestBack.length && ingestBackMs.length > 0 ? Math.max(...ingestBackMs) : undefined;
    const abandoned = sent.filter((s) => s.abandoned && s.activityId === undefined).length;
    const killsBy = Object.fromEntries(KILLED.map((n) => [n, kills.filter((k) => k.service === n).length]));
    const loadS = (loadEnd - loadStart) / 1000;

    return {
      versions: { kafka: kafka.version, postgres: pgVersion },
      rows: [
        {
          measure: 'load held',
          value: `${Math.round(sent.length / loadS)} events/s for ${Math.round(loadS)} s (${singles} single POSTs, ${bulks} bulk POSTs of 1-100)`,
        },
        { measure: 'events sent (half keyed, half with a contact)', value: sent.length },
        { measure: 'events accepted', value: accepted.length },
        { measure: 'not accepted: unkeyed, unanswered (not retried)', value: abandoned },
        { measure: 'not accepted: keyed, given up after 180 s of retries', value: notAcceptedGaveUp },
        { measure: 'conversations published (with messages)', value: `${conversations.size} (${messageCount} messages)` },
        { measure: 'kills (-9) per service', value: KILLED.map((n) => `${n} ${killsBy[n]}`).join(', ') },
        { measure: 'HTTP requests (with retries)', value: `${requests} (${retries} retries)` },
        { measure: 'answers by status', value: byStatus(statuses) },
        serverErrorsRow(statuses),
        noneRow('lost (accepted, no activity)', lost),
        noneRow('doubled (an event stored twice, or twice on a timeline)', doubled),
        noneRow('activity under another id than answered', wrongId),
        noneRow('timeline entries missing or wrong', timelineMissing + timelineWrong),
        {
          measure: 'metric events missing, or two ids for one',
          value: `${metricMissing}, ${metricTwoIds} (${metricDeliveries} delivered for ${metricIds.size} activities)`,
          goal: { text: '0, 0', met: metricMissing === 0 && metricTwoIds === 0 },
        },
        {
          measure: 'flow triggers missing, unexpected',
          value: `${triggersMissing}, ${triggersUnexpected} (of ${expectedTriggers} expected)`,
          goal: { text: '0, 0', met: triggersMissing === 0 && triggersUnexpected === 0 },
        },
        {
          measure: 'duplicate triggers (database, topic)',
          value: `${duplicateTriggersDb}, ${duplicateTriggersTopic}`,
          goal: { text: '0', met: duplicateTriggers === 0 },
        },
        {
          measure: 'conversations not exported, exported twice, messages wrong',
          value: `${convMissing}, ${convTwice}, ${messagesWrong}${exportFailure ? ` (export failed: ${exportFailure})` : ''}`,
          goal: { text: '0, 0, 0', met: convMissing === 0 && convTwice === 0 && messagesWrong === 0 && !exportFailure },
        },
        {
          measure: 'ingest 2xx again after a restart (max, median)',
          value: `${sec(ingestMax)} s, ${sec(median(ingestBackMs))} s`,
          goal: { text: '≤ 5 s from process start', met: ingestMax !== undefined && ingestMax <= 5_000 },
        },
        ...projectorRows,
        ...KILLED.map((n) => ({ measure: `${n} restart, medians from spawn`, value: breakdown(n) })),
        {
          measure: `loading the code alone (node${fromSource ? ' + tsx' : ''} + imports, no I/O), under the load`,
          value: codeLoads.map((c) => `${sec(c.ms)} s at ${c.atS} s`).join(', '),
        },
        { measure: 'projections caught up after the load', value: sec(caughtUpMs), unit: 's', goal: { text: 'yes', met: caughtUpMs !== undefined } },
        { measure: 'stored though not accepted', value: storedNotAccepted, unit: '(unanswered unkeyed events that landed: allowed)' },
        noneRow('answered 2xx without an activity id', badAnswers),
      ],
      details: {
        rate,
        loadMs,
        slotMs,
        killsPerService,
        totalConversations,
        statuses,
        kills,
        codeLoads,
        flows: flowDefs.map((f, i) => ({ ...f, id: flows[i] })),
        exportPages,
        convPublishFailures,
        timelineMissing,
        timelineWrong,
        samples,
      },
      notes: [
        `Load from the harness process, open loop at ${rate.toFixed(0)} events/s: ${Math.round(singleShare * 100)}% as single POSTs, the rest in bulk POSTs of 1 to 100 events; 40% placed_order, 30% viewed_product, 30% clicked_link (no flow); half keyed (remote_id), half with a contact (2,000 emails).`,
        `A failed request is sent again with the same body (same remote_id) when its events are keyed, or when it surely recorded nothing (connection refused, 503); an unkeyed event whose request was cut is not sent again and counts as not accepted.`,
        `Kills: ${kills.length} in ${slotMs / 1000} s slots (one per slot, at a random moment in its first half, the services in a seeded random order), each \`kill -9\` followed at once by a new process on the same port. query-api (flows, export) runs beside and is not killed.`,
        "Ingest back: from the new process's spawn to the first 202 of a probe sent every 100 ms. A projector processing again: from the spawn to the first checkpoint it writes (projection_offsets.updated_at), or, when its upstream is down too, to its joining the group (it listens only then) with its checkpoints at the end of its topic.",
        `Conversations: ${totalConversations} published to the conversations topic (as \`pnpm cli conversations import\` does) at a steady rate during the load, 30% of them upserted twice; then the export read page by page over their window.`,
      ],
    };
  },
};
