import { randomBytes, randomUUID } from 'node:crypto';
import { sql } from '@shopstream/db';
import { ownKafka } from '../ownKafka.js';
import { jsonOrUndefined, serviceEnv, startScenarioService, untilReady } from '../services.js';
import { missingActivities, whenCaughtUp } from '../caughtUp.js';
import type { Context, Figures, Scenario } from '../types.js';
import { ownPostgres } from '../ownPostgres.js';
import { byStatus, noneRow, sec, serverErrorsRow, withinRow } from '../scenarioFigures.js';

/**
 * PostgreSQL stopped for 15 s under a steady stream of single events (half with a contact, which needs the
 * database; half without, which needs only the broker and the cached key), then started again on its data.
 * Its own PostgreSQL (the embedded mode's engine in a temporary directory) and its own broker; ingest-api and
 * activity-projector as separate processes; the load from this process.
 */
export const postgresOutage: Scenario = {
  name: 'postgres-outage',
  description: 'PostgreSQL stopped 15 s under load: 503 + Retry-After (never 500, never hanging), readyz red, nothing accepted lost',
  async run(ctx: Context): Promise<Figures> {
    const { rate, outageMs, beforeMs, afterMs } = ctx.sized({
      rate: [100, 200],
      outageMs: [8_000, 15_000],
      beforeMs: [4_000, 8_000],
      afterMs: [8_000, 15_000],
    });

    const pg = await ownPostgres(ctx);
    const pgVersion = pg.version;
    const kafka = await ownKafka(ctx);

    const shopId = randomUUID();
    const key = `faults_${randomBytes(24).toString('base64url')}`;
    const env = serviceEnv({ databaseUrl: pg.url, brokers: kafka.brokers, apiKeys: `${key}=${shopId}` });
    const ingest = startScenarioService(ctx, 'ingest-api', env);
    const projector = startScenarioService(ctx, 'activity-projector', env);
    await untilReady(ingest, 120_000);
    await untilReady(projector, 120_000);
    ctx.log('services ready; load starts');

    const headers = { authorization: `Bearer ${key}`, 'x-shop-id': shopId, 'content-type': 'application/json' };
    const statuses: Record<string, number> = {};
    const accepted: string[] = [];
    let without503RetryAfter = 0;
    let outsideEnvelope = 0;
    let slow = 0; // answered after more than 2 s, or not at all within 15 s
    const slowSamples: { t: number; ms: number; status: string; withContact: boolean }[] = [];
    let stoppedAt = 0;
    let maxLatencyMs = 0;
    let sent = 0;
    let phase: 'before' | 'outage' | 'after' = 'before';
    let pgBackAt = 0;
    let firstContact202AfterBack = 0;
    const byPhase: Record<string, Record<string, number>> = { before: {}, outage: {}, after: {} };
    const inflight = new Set<Promise<void>>();
    const one = async (i: number) => {
      const withContact = i % 2 === 0;
      const body = {
        name: 'Viewed',
        metric: { metric_name: withContact ? 'placed_order' : 'viewed_product' },
        ...(withContact ? { contact: { email: `c${i % 500}@example.com` } } : {}),
      };
      const t0 = Date.now();
      const p = phase;
      let status = 'timeout';
      try {
        const res = await fetch(`${ingest.baseUrl}/v2026-04/events/`, {
          method: 'POST',
          headers,
          body: JSON.stringify(body),
          signal: AbortSignal.timeout(15_000),
        });
        status = String(res.status);
        const text = await res.text();
        const parsed = jsonOrUndefined(text);
        if (res.status === 202) {
          accepted.push(parsed.activity_id);
          if (withContact && pgBackAt && !firstContact202AfterBack && t0 >= pgBackAt) firstContact202AfterBack = Date.now();
        } else if (!parsed?.error?.code || !parsed.error.request_id) outsideEnvelope++;
        if (res.status === 503 && !res.headers.get('retry-after')) without503RetryAfter++;
      } catch {
        status = 'timeout';
      }
      const ms = Date.now() - t0;
      maxLatencyMs = Math.max(maxLatencyMs, ms);
      if (ms > 2_000) {
        slow++;
        if (slowSamples.length < 200) slowSamples.push({ t: t0 - (stoppedAt || t0), ms, status, withContact });
      }
      statuses[status] = (statuses[status] ?? 0) + 1;
      byPhase[p][status] = (byPhase[p][status] ?? 0) + 1;
    };
    let loadOn = true;
    const load = (async () => {
      const t0 = Date.now();
      while (loadOn) {
        const due = Math.floor(((Date.now() - t0) / 1000) * rate);
        while (sent < due) {
          const p = one(sent++);
          inflight.add(p);
          void p.finally(() => inflight.delete(p));
        }
        await new Promise((r) => setTimeout(r, 5));
      }
    })();

    // /readyz of ingest, polled twice a second throughout: how long it takes to turn red, and green again.
    const readySamples: { at: number; status: number | 'timeout'; ms: number }[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const t = Date.now();
        let s: number | 'timeout' = 'timeout';
        try {
          s = (await fetch(`${ingest.baseUrl}/readyz`, { signal: AbortSignal.timeout(5_000) })).status;
        } catch {
          s = 'timeout';
        }
        readySamples.push({ at: t, status: s, ms: Date.now() - t });
        await new Promise((r) => setTimeout(r, 500));
      }
    })();

    await new Promise((r) => setTimeout(r, beforeMs));
    stoppedAt = Date.now();
    await pg.stop(); // pg_ctl stop: the database is gone
    phase = 'outage';
    ctx.log(`PostgreSQL stopped for ${outageMs / 1000} s`);
    await new Promise((r) => setTimeout(r, outageMs));
    await pg.start();
    pgBackAt = Date.now();
    phase = 'after';
    ctx.log('PostgreSQL started again');
    await new Promise((r) => setTimeout(r, afterMs));
    loadOn = false;
    await load;
    await Promise.allSettled([...inflight]);
    polling = false;
    await poller;
    ctx.log(`load stopped: ${sent} sent, ${accepted.length} accepted`);

    // Projection caught up: every accepted event an activity. The time counts from PostgreSQL's return.
    const db = pg.db;
    const missing = () => missingActivities(db, accepted, shopId);
    const caughtUpAt = await whenCaughtUp(missing);
    const caughtUpMs = caughtUpAt === undefined ? undefined : caughtUpAt - pgBackAt;
    const lost = await missing();
    const [tl] = await db.query(sql`
      SELECT count(*)::int AS doubled FROM (
        SELECT activity_id FROM contact_timeline WHERE shop_id = ${shopId} GROUP BY activity_id HAVING count(*) > 1) d`);
    const [extra] = await db.query(sql`SELECT count(*)::int AS n FROM activities WHERE shop_id = ${shopId} AND NOT (id = ANY(${accepted}::uuid[]))`);

    const during = readySamples.filter((s) => s.at >= stoppedAt + 2_500 && s.at < pgBackAt);
    const firstRed = readySamples.find((s) => s.at >= stoppedAt && s.status !== 200);
    const greenAgain = readySamples.find((s) => s.at >= pgBackAt && s.status === 200);
    const ingestBackMs = firstContact202AfterBack ? firstContact202AfterBack - pgBackAt : undefined;
    return {
      versions: { kafka: kafka.version, postgres: pgVersion },
      rows: [
        { measure: 'load held', value: rate, unit: 'requests/s (half with a contact)' },
        { measure: 'fault', value: `PostgreSQL stopped ${outageMs / 1000} s, started on its data`, unit: '' },
        { measure: 'requests sent', value: sent },
        { measure: 'accepted (202)', value: accepted.length },
        { measure: 'answers by status', value: byStatus(statuses) },
        serverErrorsRow(statuses),
        noneRow('503 without Retry-After', without503RetryAfter),
        noneRow('answers outside the error envelope', outsideEnvelope),
        noneRow('answers after more than 2 s (or none in 15 s)', slow),
        { measure: 'slowest answer', value: Number((maxLatencyMs / 1000).toFixed(2)), unit: 's' },
        {
          measure: 'contactless accepted during the outage',
          value: byPhase.outage['202'] ?? 0,
          goal: { text: '> 0 (cached key, broker only)', met: (byPhase.outage['202'] ?? 0) > 0 },
        },
        {
          measure: '/readyz red during the outage (samples)',
          value: `${during.filter((s) => s.status === 503).length} of ${during.length}`,
          goal: { text: 'all', met: during.length > 0 && during.every((s) => s.status === 503) },
        },
        {
          measure: '/readyz slowest answer',
          value: Number((Math.max(...readySamples.map((s) => s.ms)) / 1000).toFixed(2)),
          unit: 's',
          goal: { text: '≤ 2.5 s', met: readySamples.every((s) => s.ms <= 2_500) },
        },
        { measure: '/readyz red after the stop', value: sec(firstRed ? firstRed.at - stoppedAt : undefined), unit: 's' },
        { measure: '/readyz green after the start', value: sec(greenAgain ? greenAgain.at - pgBackAt : undefined), unit: 's' },
        withinRow('ingest with a contact 202 again after the start', ingestBackMs, 5_000),
        {
          measure: 'projection caught up after the start',
          value: sec(caughtUpMs),
          unit: 's',
          goal: { text: '≤ 10 s after the load ends', met: caughtUpMs !== undefined && caughtUpMs <= afterMs + 10_000 },
        },
        noneRow('lost (202 without an activity)', lost),
        noneRow('doubled (an activity twice on a timeline)', Number(tl.doubled)),
        { measure: 'stored though not answered 202', value: Number(extra.n), unit: '(503s or timeouts that landed: allowed)' },
      ],
      details: {
        rate,
        outageMs,
        beforeMs,
        afterMs,
        statuses,
        byPhase,
        slowSamples,
        readySamples: readySamples.map((s) => ({ t: s.at - stoppedAt, status: s.status, ms: s.ms })),
      },
      notes: [
        `Load from the harness process at ${rate} single events/s, open loop, each request with a 15 s timeout; ingest-api and activity-projector as separate processes on their own broker and PostgreSQL.`,
        'Times count from PostgreSQL stopping or starting; the projection time includes the events sent after the start.',
      ],
    };
  },
};
