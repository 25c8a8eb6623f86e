import { randomBytes, randomUUID } from 'node:crypto';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import path from 'node:path';
import { sql, type Db } from '@shopstream/db';
import { processAlive, startLocalKafka, waitForKafka, type KafkaHandle } from '@shopstream/testkit';
import { Pool } from 'undici';
import { jsonOrUndefined, serviceEnv, startScenarioService, untilReady } from '../services.js';
import { missingActivities, whenCaughtUp } from '../caughtUp.js';
import type { Context, Figures, Scenario } from '../types.js';
import { ownPostgres } from '../ownPostgres.js';
import { brokerStartedAt } from '../ownKafka.js';

/**
 * The broker killed (-9) for 20 s under 1,000 events/s (FAULTS_BROKER_OUTAGE_RATE), half as single events and half
 * in bulk requests of 10 (keyed and unkeyed, with and without a contact), then started again on its data at the same address. Its own broker (one KRaft node) and its own
 * PostgreSQL; ingest-api, activity-projector and flow-matcher as separate processes; the load from this
 * process. Checks: only 202 (200 for a bulk) and 503 + Retry-After in the error envelope, nothing accepted lost or doubled,
 * ingest 2xx again within 5 s of the broker's return, each projector applying again within 10 s of it.
 */
export const brokerOutage: Scenario = {
  name: 'broker-outage',
  description:
    'broker killed -9 for 20 s under 1,000 events/s (half single, half in bulks of 10), restarted on its data: 2xx or 503 + Retry-After only, nothing lost, projectors back within 10 s',
  async run(ctx: Context): Promise<Figures> {
    // Events per second, half of them as single requests and half in bulk requests of BULK: 1,000 single
    // requests/s is more than this 2-core machine holds with the harness, three services, the broker and
    // PostgreSQL on it, before any fault (a run at 08:29: 2,797 of 10,004 requests answered 202 in the 10 s
    // before the kill, 3,938 unanswered in 15 s); 1,000 events/s as 500 single + 50 bulk requests it holds.
    // FAULTS_BROKER_OUTAGE_RATE asks for another rate.
    const sized = ctx.sized({ eventRate: [600, 1_000], outageMs: [8_000, 20_000], beforeMs: [5_000, 10_000], afterMs: [12_000, 20_000] });
    const { outageMs, beforeMs, afterMs } = sized;
    const eventRate = Number(process.env.FAULTS_BROKER_OUTAGE_RATE ?? sized.eventRate);
    const BULK = 10;
    // Requests per second: per 2 x BULK events, BULK single requests and one bulk request.
    const rate = Math.ceil((eventRate / (2 * BULK)) * (BULK + 1));

    const pg = await ownPostgres(ctx, { poolSize: 2 });
    const db: Db = pg.db;
    const pgVersion = pg.version;

    const first = await startLocalKafka({});
    ctx.defer(() => first.stop());
    let second: KafkaHandle | undefined;
    ctx.defer(async () => void (await second?.stop()));
    const brokerPort = Number(first.brokers[0].split(':').pop());
    ctx.log(`Kafka ${first.version} on ${first.brokers.join(',')} (controller ${first.controllerPort}, pid ${first.pid}, data in ${first.runDir})`);

    const shopId = randomUUID();
    const key = `faults_${randomBytes(24).toString('base64url')}`;
    const prefix = 'shopstream.';
    const env = serviceEnv({ databaseUrl: pg.url, brokers: first.brokers, apiKeys: `${key}=${shopId}` }, { CONSUMER_GROUP_PREFIX: prefix });
    const ingest = startScenarioService(ctx, 'ingest-api', env);
    // ingest first: it creates the topics the consumers subscribe to.
    await untilReady(ingest, 120_000);
    const projector = startScenarioService(ctx, 'activity-projector', env);
    const matcher = startScenarioService(ctx, 'flow-matcher', env);
    await untilReady(projector, 120_000);
    await untilReady(matcher, 120_000);
    ctx.log('services ready; load starts');

    // Each projector's progress, as its checkpoint (projection_offsets, written in the transaction that
    // applies a batch): sampled every 100 ms, so "applying again" is the first sample after the broker's
    // return whose offsets moved past those it had when the broker came back.
    const groups = { 'activity-projector': `${prefix}activity-projector`, 'flow-matcher': `${prefix}flow-matcher` } as const;
    type Group = keyof typeof groups;
    // Each sample keeps, per group, the times its partitions' checkpoints were last written (now() of the
    // applying transaction: the database's clock, not this process's, which a busy machine can stall).
    const progress: { at: number; offsets: Record<Group, number>; written: Record<Group, number[]> }[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const at = Date.now();
        try {
          const rows = await db.query(sql`
            SELECT group_id, coalesce(sum(next_offset), 0)::bigint AS n,
                   array_agg((extract(epoch FROM updated_at) * 1000)::bigint) AS written
            FROM projection_offsets WHERE group_id = ANY(${Object.values(groups)}::text[]) GROUP BY group_id`);
          const by = new Map(rows.map((r) => [String(r.group_id), { n: Number(r.n), written: (r.written as unknown[]).map(Number) }]));
          const of = (g: Group) => by.get(groups[g]) ?? { n: 0, written: [] };
          progress.push({
            at,
            offsets: { 'activity-projector': of('activity-projector').n, 'flow-matcher': of('flow-matcher').n },
            written: { 'activity-projector': of('activity-projector').written, 'flow-matcher': of('flow-matcher').written },
          });
        } catch {
          // a sample missed; the next one counts
        }
        await new Promise((r) => setTimeout(r, Math.max(0, 100 - (Date.now() - at))));
      }
    })();

    const headers = { authorization: `Bearer ${key}`, 'x-shop-id': shopId, 'content-type': 'application/json' };
    const run = randomBytes(4).toString('hex');
    const statuses: Record<string, number> = {};
    const byPhase: Record<string, Record<string, number>> = { before: {}, outage: {}, after: {} };
    const byKind: Record<string, Record<string, number>> = {};
    const accepted: string[] = [];
    const acceptedKeyed: string[] = [];
    let without503RetryAfter = 0;
    let outsideEnvelope = 0;
    let bulkItemErrors = 0;
    let maxLatencyMs = 0;
    let sent = 0;
    let phase: 'before' | 'outage' | 'after' = 'before';
    let killedAt = 0;
    let spawnedAt = 0; // the restarted broker's JVM started
    let backAt = 0; // the restarted broker served: its log's "Kafka Server started", or the probe's answer if earlier
    let probeBackAt = 0;
    let first202AfterSpawn = 0;
    let brokerWarmMs = 0;
    const inflight = new Set<Promise<void>>();
    // While the broker is away ingest holds each request up to INGEST_PUBLISH_TIMEOUT_MS (5 s) before its 503,
    // so about rate x 5 requests are open at once: the pool has room for that (a smaller one queues requests
    // here until they time out, which is the harness's doing, not the service's), and no more.
    // undici's request API, not fetch: a third of the CPU per request, which on a busy 2-core machine decides
    // whether this process can hold the rate at all. A request unanswered 15 s after it was sent is a timeout.
    const pool = new Pool(ingest.baseUrl, { connections: rate * 7, pipelining: 1, keepAliveTimeout: 30_000, headersTimeout: 15_000, bodyTimeout: 15_000 });
    ctx.defer(() => pool.close());
    let sentEvents = 0;
    let notSent = 0; // skipped: this process already had MAX_INFLIGHT requests open
    const MAX_INFLIGHT = rate * 12;
    // Event i: a quarter each keyed with a remote_id or not, with a contact or not.
    const eventOf = (i: number) => {
      const keyed = i % 2 === 0;
      const withContact = (i >> 1) % 2 === 0;
      return {
        keyed,
        kind: `${keyed ? 'keyed' : 'unkeyed'}, ${withContact ? 'contact' : 'no contact'}`,
        body: {
          name: 'Viewed product',
          metric: { metric_name: withContact ? 'placed_order' : 'viewed_product', value: i },
          ...(keyed ? { remote_id: `${run}-${i}`, remote_platform: 'faults' } : {}),
          ...(withContact ? { contact: { email: `c${i % 500}@example.com` } } : {}),
        },
      };
    };
    // Request i of the load: per 2 x BULK events, BULK single requests and then one bulk request of BULK.
    const one = async (i: number) => {
      const cycle = Math.floor(i / (BULK + 1));
      const pos = i % (BULK + 1);
      const bulk = pos === BULK;
      const first = cycle * 2 * BULK + pos;
      const events = Array.from({ length: bulk ? BULK : 1 }, (_, k) => eventOf(first + k));
      const kind = bulk ? 'bulk of 10' : events[0].kind;
      const t0 = Date.now();
      const p = phase;
      let status = 'timeout';
      try {
        const res = await pool.request(
          bulk
            ? { path: '/v2026-04/events/bulk/', method: 'POST', headers, body: JSON.stringify({ events: events.map((e) => e.body) }) }
            : { path: '/v2026-04/events/', method: 'POST', headers, body: JSON.stringify(events[0].body) },
        );
        status = String(res.statusCode);
        const text = await res.body.text();
        const parsed = jsonOrUndefined(text);
        const ok = res.statusCode === (bulk ? 200 : 202);
        if (ok) {
          // A bulk answer is per event: each success is an accepted event; an error item would be the test's own bad event.
          const ids: (string | undefined)[] = bulk
            ? parsed.results.map((r: any) => (r.status === 'success' ? r.event.activity_id : undefined))
            : [parsed.activity_id];
          ids.forEach((id, k) => {
            if (id === undefined) return void bulkItemErrors++;
            accepted.push(id);
            if (events[k].keyed) acceptedKeyed.push(id);
          });
          if (spawnedAt && t0 >= spawnedAt && !first202AfterSpawn) first202AfterSpawn = Date.now();
        } else if (!parsed?.error?.code || !parsed.error.request_id) outsideEnvelope++;
        if (res.statusCode === 503 && !res.headers['retry-after']) without503RetryAfter++;
      } catch {
        status = 'timeout';
      }
      maxLatencyMs = Math.max(maxLatencyMs, Date.now() - t0);
      statuses[status] = (statuses[status] ?? 0) + 1;
      byPhase[p][status] = (byPhase[p][status] ?? 0) + 1;
      byKind[kind] ??= {};
      byKind[kind][status] = (byKind[kind][status] ?? 0) + 1;
    };
    let loadOn = true;
    let loadStartedAt = 0;
    let loadEndedAt = 0;
    let slots = 0; // requests due by the clock: sent + notSent
    const load = (async () => {
      const t0 = (loadStartedAt = Date.now());
      while (loadOn) {
        const due = Math.floor(((Date.now() - t0) / 1000) * rate);
        while (slots < due) {
          const i = slots++;
          if (inflight.size >= MAX_INFLIGHT) {
            notSent++;
            continue;
          }
          sent++;
          sentEvents += i % (BULK + 1) === BULK ? BULK : 1;
          const p = one(i);
          inflight.add(p);
          void p.finally(() => inflight.delete(p));
        }
        await new Promise((r) => setTimeout(r, 5));
      }
      loadEndedAt = Date.now();
    })();

    // Progress every 5 s on stderr, with this process's event-loop delay: on a busy machine the load process
    // itself can fall behind, and that should be visible, not guessed.
    const loopDelay = monitorEventLoopDelay({ resolution: 20 });
    loopDelay.enable();
    let answered = 0;
    const progressLog = setInterval(() => {
      answered = Object.values(statuses).reduce((a, n) => a + n, 0);
      ctx.log(
        `${phase}: ${sent} sent, ${answered} answered (${accepted.length} events accepted), ${inflight.size} open, ${notSent} not sent; event loop delay max ${(loopDelay.max / 1e6).toFixed(0)} ms`,
      );
      loopDelay.reset();
    }, 5_000);
    ctx.defer(() => clearInterval(progressLog));

    await new Promise((r) => setTimeout(r, beforeMs));
    killedAt = Date.now();
    process.kill(first.pid!, 'SIGKILL');
    phase = 'outage';
    while (processAlive(first.pid!)) await new Promise((r) => setTimeout(r, 20));
    ctx.log(`broker killed (-9); restarted on its data in ${outageMs / 1000} s`);
    await new Promise((r) => setTimeout(r, Math.max(0, killedAt + outageMs - Date.now())));
    spawnedAt = Date.now();
    phase = 'after';
    // The broker is back when it answers metadata (describeCluster with itself registered, listTopics), as a
    // client sees it: probed every 100 ms from its start, beside testkit's own wait, which also warms the
    // group and transaction coordinators up before it resolves.
    const serving = waitForKafka(first.brokers, { what: 'restarted broker', timeoutMs: 120_000 }).then(() => (backAt = Date.now()));
    second = await startLocalKafka({ runDir: first.runDir, port: brokerPort, controllerPort: first.controllerPort, reuseData: true });
    const warmAt = Date.now();
    await serving;
    // By the broker's own log, when a starved harness saw it late: "Kafka Server started" after the restart.
    const startedByLog = brokerStartedAt(path.join(first.runDir!, 'broker.log'), spawnedAt);
    probeBackAt = backAt;
    if (startedByLog !== undefined && startedByLog < backAt) backAt = startedByLog;
    ctx.log(
      `broker answering the probe ${((backAt - spawnedAt) / 1000).toFixed(1)} s after its start, coordinators ready after ${((warmAt - spawnedAt) / 1000).toFixed(1)} s; pid ${second.pid}`,
    );
    brokerWarmMs = warmAt - spawnedAt;
    await new Promise((r) => setTimeout(r, afterMs));
    loadOn = false;
    await load;
    await Promise.allSettled([...inflight]);
    clearInterval(progressLog);
    loopDelay.disable();
    const answeredAt = Date.now();
    ctx.log(`load stopped: ${sent} sent, ${accepted.length} accepted`);

    // Projection caught up: every accepted event an activity.
    const missing = () => missingActivities(db, accepted, shopId);
    const caughtUpAt = await whenCaughtUp(missing);
    sampling = false;
    await sampler;
    const lost = await missing();
    // Doubled: an activity twice on a timeline, or one keyed event (one remote_id) as two activities.
    const [tl] = await db.query(sql`
      SELECT count(*)::int AS n FROM (
        SELECT activity_id FROM contact_timeline WHERE shop_id = ${shopId} GROUP BY activity_id HAVING count(*) > 1) d`);
    const [byRemote] = await db.query(sql`
      SELECT count(*)::int AS n FROM (
        SELECT remote_id FROM activities WHERE shop_id = ${shopId} AND remote_id IS NOT NULL GROUP BY remote_platform, remote_id HAVING count(*) > 1) d`);
    const doubled = Number(tl.n) + Number(byRemote.n);
    const [extra] = await db.query(sql`SELECT count(*)::int AS n FROM activities WHERE shop_id = ${shopId} AND NOT (id = ANY(${accepted}::uuid[]))`);

    // When each projector applied again: the first sample after the broker's return past its offsets then.
    // The first sample after the broker's start whose checkpoint moved past where it stood then; the time is
    // that of the earliest checkpoint write after the start it shows (the database's clock).
    const resumed = (g: Group): { fromServing?: number; fromStart?: number; offsetAtStart: number } => {
      const atStart = [...progress].reverse().find((s) => s.at <= spawnedAt)?.offsets[g] ?? 0;
      const moved = progress.find((s) => s.at > spawnedAt && s.offsets[g] > atStart);
      if (!moved) return { offsetAtStart: atStart };
      const writes = moved.written[g].filter((w) => w > spawnedAt);
      const at = writes.length > 0 ? Math.min(...writes) : moved.at;
      return { fromServing: Math.max(0, at - backAt), fromStart: at - spawnedAt, offsetAtStart: atStart };
    };
    const proj = resumed('activity-projector');
    const match = resumed('flow-matcher');
    const fiveHundreds = Object.entries(statuses)
      .filter(([s]) => /^5/.test(s) && s !== '503')
      .reduce((a, [, n]) => a + n, 0);
    const others = Object.entries(statuses)
      .filter(([s]) => s !== '202' && s !== '200' && s !== '503')
      .reduce((a, [, n]) => a + n, 0);
    const ingestBack = first202AfterSpawn ? { fromServing: Math.max(0, first202AfterSpawn - backAt), fromStart: first202AfterSpawn - spawnedAt } : undefined;
    const sec = (ms: number | undefined) => (ms === undefined ? 'never' : Number((ms / 1000).toFixed(1)));
    const within = (ms: number | undefined, limit: number) => ms !== undefined && ms <= limit;
    const withStart = (r: { fromServing?: number; fromStart?: number } | undefined) =>
      r?.fromServing === undefined ? 'never' : `${sec(r.fromServing)} s (${sec(r.fromStart)} s after its JVM started)`;
    return {
      versions: { kafka: first.version, postgres: pgVersion },
      rows: [
        {
          measure: 'load asked',
          value: eventRate,
          unit: `events/s: ${rate} requests/s, per ${2 * BULK} events ${BULK} single and one bulk of ${BULK} (keyed and unkeyed, with and without a contact)`,
        },
        {
          measure: 'load held',
          value: Math.round(sentEvents / ((loadEndedAt - loadStartedAt) / 1000)),
          unit: `events/s sent on average (${Math.round(sent / ((loadEndedAt - loadStartedAt) / 1000))} requests/s)`,
        },
        { measure: 'not sent (this process at its in-flight cap)', value: notSent },
        { measure: 'fault', value: `broker killed -9 for ${outageMs / 1000} s, restarted on its data`, unit: '' },
        { measure: 'broker serving again after its start', value: sec(backAt - spawnedAt), unit: 's' },
        { measure: 'broker coordinators ready after its start', value: sec(brokerWarmMs), unit: 's' },
        { measure: 'requests sent', value: sent, unit: `(${sentEvents} events)` },
        { measure: 'accepted', value: accepted.length, unit: 'events (202, or success in a bulk answer 200)' },
        { measure: 'bulk items answered error', value: bulkItemErrors, goal: { text: '0', met: bulkItemErrors === 0 } },
        {
          measure: 'answers by status',
          value: Object.entries(statuses)
            .sort()
            .map(([s, n]) => `${s}: ${n}`)
            .join(', '),
        },
        { measure: 'answers other than 202 (single), 200 (bulk) and 503', value: others, goal: { text: '0', met: others === 0 } },
        { measure: '5xx other than 503', value: fiveHundreds, goal: { text: '0', met: fiveHundreds === 0 } },
        { measure: '503 without Retry-After', value: without503RetryAfter, goal: { text: '0', met: without503RetryAfter === 0 } },
        { measure: 'answers outside the error envelope', value: outsideEnvelope, goal: { text: '0', met: outsideEnvelope === 0 } },
        { measure: 'slowest answer', value: Number((maxLatencyMs / 1000).toFixed(2)), unit: 's' },
        {
          measure: 'ingest 2xx again after the broker returned',
          value: withStart(ingestBack),
          goal: { text: '≤ 5 s', met: within(ingestBack?.fromServing, 5_000) },
        },
        {
          measure: 'activity-projector applying again after the broker returned',
          value: withStart(proj),
          goal: { text: '≤ 10 s', met: within(proj.fromServing, 10_000) },
        },
        {
          measure: 'flow-matcher applying again after the broker returned',
          value: withStart(match),
          goal: { text: '≤ 10 s', met: within(match.fromServing, 10_000) },
        },
        {
          measure: 'projection caught up after the load ended',
          value: caughtUpAt === undefined ? 'never (120 s)' : sec(Math.max(0, caughtUpAt - loadEndedAt)),
          unit: caughtUpAt === undefined ? '' : 's',
          goal: { text: '≤ 10 s', met: caughtUpAt !== undefined && caughtUpAt - loadEndedAt <= 10_000 },
        },
        { measure: 'lost (202 without an activity)', value: lost, goal: { text: '0', met: lost === 0 } },
        { measure: 'doubled (twice on a timeline, or a keyed event twice)', value: doubled, goal: { text: '0', met: doubled === 0 } },
        { measure: 'stored though not answered 202', value: Number(extra.n), unit: '(503s or timeouts that landed: allowed)' },
      ],
      details: {
        eventRate,
        rate,
        sentEvents,
        bulkItemErrors,
        outageMs,
        beforeMs,
        afterMs,
        statuses,
        byPhase,
        byKind,
        acceptedKeyed: acceptedKeyed.length,
        brokerServingAfterStartMs: backAt - spawnedAt,
        probeSawBrokerAfterStartMs: probeBackAt - spawnedAt,
        brokerWarmAfterStartMs: brokerWarmMs,
        brokerDownMs: spawnedAt - killedAt,
        ingestBack,
        resumed: { 'activity-projector': proj, 'flow-matcher': match },
        caughtUpAfterLoadMs: caughtUpAt === undefined ? null : caughtUpAt - loadEndedAt,
        lastAnswerAfterLoadMs: answeredAt - loadEndedAt,
        notSent,
        caughtUpAfterBrokerMs: caughtUpAt === undefined ? null : caughtUpAt - backAt,
        progress: progress
          .filter((s) => s.at >= killedAt - 2_000 && s.at <= backAt + 60_000)
          .filter(
            (s, i, a) =>
              i === 0 ||
              s.offsets['activity-projector'] !== a[i - 1].offsets['activity-projector'] ||
              s.offsets['flow-matcher'] !== a[i - 1].offsets['flow-matcher'],
          )
          .map((s) => ({
            t: s.at - backAt,
            ...s.offsets,
            firstWrite: Object.fromEntries(Object.entries(s.written).map(([g, w]) => [g, Math.min(...w) - backAt])),
          })),
      },
      notes: [
        `Load from the harness process at ${eventRate} events/s, open loop: per ${2 * BULK} events, ${BULK} single requests and one bulk request of ${BULK} (${rate} requests/s; a quarter of the events each keyed with a remote_id or not, with a contact or not), each request with a 15 s timeout; ingest-api, activity-projector and flow-matcher as separate processes on their own broker and PostgreSQL.`,
        'The broker is one KRaft node killed with SIGKILL and started again on its data at the same ports. Between its JVM start and serving, the restarted broker waits out its own old registration (DUPLICATE_BROKER_REGISTRATION until broker.session.timeout.ms, 9 s, ran out), as any broker restarted after a kill does; its group coordinator then loads the groups before consumers can join.',
        "The flow-matcher consumes the metric events the activity-projector emits, so its first record after the return comes after the projector applied again and relayed its outbox: its time includes the projector's.",
        "A projector applies again at the first write of its checkpoint (projection_offsets.updated_at, the applying transaction's time) that moves it past where it stood when the broker was started; the broker's return is the \"Kafka Server started\" line of its own log (or the harness's metadata probe, if that answered first). Times from the database's and the broker's clocks, so a stalled harness does not stretch them; the first 2xx is when the harness received it.",
      ],
    };
  },
};
