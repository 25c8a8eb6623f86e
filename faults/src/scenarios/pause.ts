import {
  checkOutcome,
  consumerTroubles,
  endStates,
  groupLag,
  applyingAgain,
  matcherGroup,
  loadRows,
  PARTITIONS,
  projectorGroup,
  sleep,
  startLoad,
  firstAnswerAfter,
  thin,
  statusCounts,
  startPipeline,
  untilAssigned,
  secondsRow,
  metricTotal,
} from '../groupFaults.js';
import { until } from '../services.js';
import type { Context, Figures, Row, Scenario } from '../types.js';
import { byStatus, noneRow, sec, serverErrorsRow, withinRow } from '../scenarioFigures.js';

/**
 * A process frozen, not killed (SIGSTOP: a VM paused, a long GC, a container throttled to nothing), then thawed
 * (SIGCONT): first one of two activity-projector replicas, then ingest-api, under 300 events/s. Its own broker
 * and PostgreSQL; two activity-projector replicas, the flow matcher and ingest-api as separate processes.
 * A frozen consumer misses its heartbeats, so its group moves its partitions to the other replica; thawed, it
 * finds itself expelled and must rejoin. Checks: nothing lost or doubled, each consumer handling records again
 * within 10 s of the SIGCONT that let records flow to it again, none alive but idle at the end (every consumer
 * process answering /healthz and holding partitions of its group, each group's lag reaching 0), and the
 * `metrics` records at most one relay round (5,000) above the activities.
 */
export const pause: Scenario = {
  name: 'pause',
  description:
    'one of two activity-projector replicas SIGSTOPped 60 s, then ingest-api 20 s, under 300 events/s: nothing lost or doubled, consumers back ≤ 10 s, ingest answering again ≤ 15 s (the timeout of the load), none alive but idle',
  async run(ctx: Context): Promise<Figures> {
    const { rate, leadMs, projectorStopMs, betweenMs, ingestStopMs, tailMs } = ctx.sized({
      rate: [300, 300],
      leadMs: [10_000, 15_000],
      projectorStopMs: [30_000, 60_000],
      betweenMs: [20_000, 30_000],
      ingestStopMs: [10_000, 20_000],
      // The expelled consumers of the issue crashed about 2 minutes after their SIGCONT: a full run waits that long.
      tailMs: [30_000, 90_000],
    });
    const p = await startPipeline(ctx, [
      { name: 'activity-projector', label: 'projector-1' },
      { name: 'activity-projector', label: 'projector-2' },
      { name: 'flow-matcher', label: 'matcher' },
    ]);
    const [proj1, proj2] = p.consumers;
    const before = await untilAssigned(p.admin, projectorGroup, [proj1.label, proj2.label], 120_000);
    if (before.ms === undefined) throw new Error(`the two projector replicas never shared the partitions: ${JSON.stringify(before.last)}`);
    const frozen = ctx.random() < 0.5 ? proj1 : proj2;
    ctx.log(`both replicas hold partitions; load starts at ${rate} events/s; ${frozen.label} will be frozen`);
    const load = startLoad(ctx, p, rate);
    // Faults only once ingest keeps up with the load: a figure taken from a backlog measures the machine, not the fault.
    const steadyMs = await load.steady(90_000);
    ctx.log(`ingest ${steadyMs === undefined ? 'never kept up within 90 s' : `keeping up after ${sec(steadyMs)} s`}`);

    await sleep(leadMs);
    const projectorStoppedAt = Date.now();
    frozen.service.process.kill('SIGSTOP');
    ctx.log(`SIGSTOP ${frozen.label} (pid ${frozen.service.process.pid}) for ${projectorStopMs / 1000} s`);
    await sleep(projectorStopMs);
    const projectorContAt = Date.now();
    frozen.service.process.kill('SIGCONT');
    const frozenBack = applyingAgain(p.admin, frozen, projectorContAt);
    ctx.log(`SIGCONT ${frozen.label}`);
    await sleep(betweenMs);
    const ingestStoppedAt = Date.now();
    p.ingest.process.kill('SIGSTOP');
    ctx.log(`SIGSTOP ingest-api (pid ${p.ingest.process.pid}) for ${ingestStopMs / 1000} s`);
    await sleep(ingestStopMs);
    const ingestContAt = Date.now();
    p.ingest.process.kill('SIGCONT');
    // No record reached any consumer while ingest-api was stopped: each applies again once records flow.
    const afterIngest = p.consumers.map((c) => applyingAgain(p.admin, c, ingestContAt).then((r) => ({ label: c.label, ...r })));
    ctx.log(`SIGCONT ingest-api; load goes on ${tailMs / 1000} s`);
    await sleep(tailMs);
    const { startedAt, endedAt } = await load.stop();
    ctx.log(`load stopped: ${load.sent()} sent, ${load.accepted.length} accepted`);
    // Requests ingest-api dropped because their clients had given up (the thaw's backlog), and their events.
    const dropped = await metricTotal(p.ingest, 'shopstream_http_requests_total', ['status="499"'], 5_000);
    const abandoned = await metricTotal(p.ingest, 'shopstream_ingest_events_total', ['outcome="abandoned"'], 5_000);

    // Lag of both groups at 0: what "caught up" means to an operator's dashboard (the activities are checked below).
    let lagZeroMs: number | undefined;
    try {
      lagZeroMs = await until(
        async () => (await groupLag(p.admin, projectorGroup)) === 0 && (await groupLag(p.admin, matcherGroup)) === 0,
        120_000,
        'lag 0',
        500,
      );
    } catch {
      lagZeroMs = undefined;
    }
    const lagAtEnd = { projector: await groupLag(p.admin, projectorGroup), matcher: await groupLag(p.admin, matcherGroup) };
    const outcome = await checkOutcome(ctx, p, load.accepted, endedAt);
    const ends = await endStates(p.admin, p.consumers);
    const notWorking = ends.filter((e) => !e.working);

    const frozenAgain = await frozenBack;
    const ingestAgain = await Promise.all(afterIngest);
    const ingestBack = firstAnswerAfter(load.answers, ingestContAt, '202');
    const answersByStatus = statusCounts(load.answers);
    const troubles = Object.fromEntries(p.consumers.map((c) => [c.label, consumerTroubles(c)]));
    const loadS = (endedAt - startedAt) / 1000;
    const overRound = outcome.metricRecords - outcome.activities;
    const rows: Row[] = [
      ...loadRows(load, rate, loadS, steadyMs),
      {
        measure: 'faults',
        value: `SIGSTOP ${frozen.label} ${sec(projectorContAt - projectorStoppedAt)} s; SIGSTOP ingest-api ${sec(ingestContAt - ingestStoppedAt)} s`,
      },
      { measure: 'events accepted', value: load.accepted.length },
      { measure: 'answers by status', value: byStatus(answersByStatus) },
      serverErrorsRow(answersByStatus),
      backRow(`${frozen.label} applying records again after its SIGCONT`, frozenAgain),
      ...ingestAgain.map((x) => backRow(`${x.label} applying records again after ingest-api's SIGCONT`, x)),
      // Within the clients' timeout (15 s): answered before the clients still waiting at the thaw give up, so ingest
      // must not spend that time on the requests of those who gave up already.
      withinRow("ingest-api's first 202 after its SIGCONT", ingestBack, 15_000),
      {
        measure: 'requests ingest-api dropped, their clients gone (counted 499)',
        value: dropped ?? 'not read',
        unit: abandoned === undefined ? '' : `(${abandoned} events not published)`,
      },
      {
        measure: 'consumer processes not working at the end (alive but idle, or exited)',
        value:
          notWorking.length === 0
            ? 0
            : `${notWorking.length}: ${notWorking.map((e) => `${e.label} (healthz ${e.healthz}, readyz ${e.readyz}, ${e.partitions.length} partitions${e.exited ? ', exited' : ''})`).join('; ')}`,
        goal: { text: '0', met: notWorking.length === 0 },
      },
      {
        measure: 'consumer lag 0 after the load ended (activity-projector, flow-matcher)',
        value: lagZeroMs === undefined ? `never (120 s; lag ${lagAtEnd.projector}, ${lagAtEnd.matcher})` : sec(lagZeroMs),
        unit: lagZeroMs === undefined ? '' : 's',
        goal: { text: 'reaches 0', met: lagZeroMs !== undefined },
      },
      secondsRow('projection caught up after the load ended', outcome.caughtUpAfterLoadMs),
      noneRow('lost (accepted, no activity 120 s after the load)', outcome.lost),
      ...(outcome.lost > 0 ? [{ measure: 'of the lost, in the events log (never projected)', value: outcome.lostButInLog }] : []),
      noneRow('doubled (twice on a timeline, or one remote_id twice)', outcome.doubled),
      {
        measure: '`metrics` records above the activities',
        value: `${overRound} (${outcome.metricRecords} records, ${outcome.metricIds} ids, for ${outcome.activities} activities)`,
        goal: { text: '≤ 5,000 (one relay round)', met: overRound <= 5_000 },
      },
      { measure: 'activities without a metric event', value: outcome.metricMissing },
      { measure: 'stored though not accepted', value: outcome.storedNotAccepted, unit: '(timeouts that landed: allowed)' },
    ];
    return {
      versions: p.versions,
      rows,
      details: {
        rate,
        leadMs,
        projectorStopMs,
        betweenMs,
        ingestStopMs,
        tailMs,
        frozen: frozen.label,
        times: { startedAt, projectorStoppedAt, projectorContAt, ingestStoppedAt, ingestContAt, endedAt },
        answersByStatus,
        outcome,
        lagAtEnd,
        ends,
        applyingAgain: { [frozen.label]: frozenAgain, afterIngest: ingestAgain },
        consumerTroubles: troubles,
        handledSamples: Object.fromEntries(p.consumers.map((c) => [c.label, thin(c.handled, startedAt)])),
      },
      notes: [
        `Load from the harness process: ${rate} single events/s, open loop, round-robin over ${PARTITIONS} shops chosen one per partition (half keyed with a remote_id, half with a contact), each request with 15 s; ingest-api, two activity-projector replicas and the flow-matcher as separate processes on their own broker (${PARTITIONS} partitions) and PostgreSQL.`,
        'SIGSTOP freezes a process without closing its sockets: its consumer misses its heartbeats and its group moves its partitions to the other replica; SIGCONT thaws it into a group that expelled it.',
        "Applying again: the process holds partitions in the broker's description of its group (every 250 ms), and then a sample of its own shopstream_consumer_records_total (its /metrics, every 500 ms) rises; from the SIGCONT. Not working at the end: exited, /healthz not 200, or holding no partition in the broker's description of its group (given 30 s to settle).",
        `Consumer log lines about crashes and expulsions: ${Object.entries(troubles)
          .map(([l, t]) => `${l} ${t.length}`)
          .join(', ')} (in details.consumerTroubles).`,
      ],
    };
  },
};

/** A consumer applying again within 10 s of the SIGCONT, with when it held partitions again beside. */
const backRow = (measure: string, r: { ms?: number; memberMs?: number }): Row => ({
  ...withinRow(measure, r.ms, 10_000),
  unit:
    r.ms === undefined
      ? `(holding partitions: ${r.memberMs === undefined ? 'never' : `${sec(r.memberMs)} s`})`
      : `s (holding partitions after ${sec(r.memberMs)} s)`,
});
