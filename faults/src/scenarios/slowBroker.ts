import { readFileSync } from 'node:fs';
import {
  checkOutcome,
  loadRows,
  firstAnswerAfter,
  applyingAgain,
  PARTITIONS,
  sleep,
  startLoad,
  startPipeline,
  statusCounts,
  thin,
  secondsRow,
} from '../groupFaults.js';
import type { Context, Figures, Scenario } from '../types.js';
import { byStatus, noneRow, sec, serverErrorsRow } from '../scenarioFigures.js';

/** How long a request may take for its answer, while the broker stalls, before the producer should have been told 503. */
const ANSWER_WITHIN_MS = 2_000;
/** Rows the outbox relay takes per round (packages/projections outbox.ts): the most a blind resend of one round can double. */
const RELAY_ROUND = 5_000;

const percentile = (xs: number[], q: number) => {
  if (xs.length === 0) return undefined;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

/**
 * The broker frozen (SIGSTOP) for 30 s under load, then thawed (SIGCONT): unlike a killed broker, its sockets
 * stay open, so every send waits for its timeout instead of failing at once. Its own broker and PostgreSQL;
 * ingest-api and activity-projector (whose outbox relay publishes the metric events) as separate processes.
 * Checks: nothing lost, each request sent meanwhile answered within 2 s with 503 + Retry-After (a producer
 * should retry later, not hang), and the `metrics` records at most one relay round (5,000) above the activities
 * (a relay resending whole rounds whose sends timed out though the broker had them would double far more).
 */
export const slowBroker: Scenario = {
  name: 'slow-broker',
  description:
    'the broker SIGSTOPped 30 s under 300 events/s (sends time out, not fail): nothing lost, 503 + Retry-After ≤ 2 s meanwhile, metric duplicates ≤ one relay round',
  async run(ctx: Context): Promise<Figures> {
    const { rate, leadMs, stallMs, tailMs } = ctx.sized({ rate: [300, 300], leadMs: [10_000, 15_000], stallMs: [20_000, 30_000], tailMs: [30_000, 60_000] });
    const p = await startPipeline(ctx, [{ name: 'activity-projector', label: 'projector' }]);
    const [projector] = p.consumers;
    const brokerPid = p.kafka.pid;
    if (brokerPid === undefined) throw new Error('slow-broker needs a local broker process to stop (testkit gave no pid)');
    // Thawed whatever happens, or stopping it at the end would wait on a frozen JVM.
    ctx.defer(() => void process.kill(brokerPid, 'SIGCONT'));
    ctx.log(`load starts at ${rate} events/s`);
    const load = startLoad(ctx, p, rate);
    // Faults only once ingest keeps up with the load: a figure taken from a backlog measures the machine, not the fault.
    const steadyMs = await load.steady(90_000);
    ctx.log(`ingest ${steadyMs === undefined ? 'never kept up within 90 s' : `keeping up after ${sec(steadyMs)} s`}`);
    await sleep(leadMs);
    const stoppedAt = Date.now();
    process.kill(brokerPid, 'SIGSTOP');
    ctx.log(`SIGSTOP broker (pid ${brokerPid}) for ${stallMs / 1000} s`);
    await sleep(stallMs);
    const contAt = Date.now();
    process.kill(brokerPid, 'SIGCONT');
    const projectorAgain = applyingAgain(p.admin, projector, contAt);
    ctx.log(`SIGCONT broker; load goes on ${tailMs / 1000} s`);
    await sleep(tailMs);
    const { startedAt, endedAt } = await load.stop();
    ctx.log(`load stopped: ${load.sent()} sent, ${load.accepted.length} accepted`);
    const outcome = await checkOutcome(ctx, p, load.accepted, endedAt);

    const during = load.answers.filter((a) => a.sentAt >= stoppedAt && a.sentAt < contAt);
    const told = (a: { status: string; retryAfter: boolean }) => /^2/.test(a.status) || (a.status === '503' && a.retryAfter);
    const late = during.filter((a) => a.ms > ANSWER_WITHIN_MS || !told(a));
    const duringMs = during.map((a) => a.ms);
    // The same measure before the stall: what the machine alone made of the load, to read the stall's figures against.
    const beforeMs = load.answers.filter((a) => a.sentAt < stoppedAt).map((a) => a.ms);
    const answersByStatus = statusCounts(load.answers);
    const duringByStatus = statusCounts(during);
    const ingestBack = firstAnswerAfter(load.answers, contAt, '202');
    const projectorBack = await projectorAgain;
    let log = '';
    try {
      log = readFileSync(projector.service.logFile, 'utf8');
    } catch {
      // no log: nothing counted from it
    }
    const sendTimeouts = log.split('\n').filter((l) => /timed out/i.test(l)).length;
    const overRound = outcome.metricRecords - outcome.activities;
    const loadS = (endedAt - startedAt) / 1000;
    return {
      versions: p.versions,
      rows: [
        ...loadRows(load, rate, loadS, steadyMs),
        { measure: 'fault', value: `broker SIGSTOPped ${sec(contAt - stoppedAt)} s, then SIGCONT` },
        { measure: 'events accepted', value: load.accepted.length },
        { measure: 'answers by status', value: byStatus(answersByStatus) },
        serverErrorsRow(answersByStatus),
        { measure: 'requests sent during the stall, by status', value: `${during.length}: ${byStatus(duringByStatus)}` },
        {
          measure: 'answer time of the requests sent before the stall (p50, p99, max)',
          value: `${sec(percentile(beforeMs, 0.5))} s, ${sec(percentile(beforeMs, 0.99))} s, ${sec(percentile(beforeMs, 1))} s`,
        },
        {
          measure: 'answer time of the requests sent during the stall (p50, p99, max)',
          value: `${sec(percentile(duringMs, 0.5))} s, ${sec(percentile(duringMs, 0.99))} s, ${sec(percentile(duringMs, 1))} s`,
        },
        {
          measure: 'requests sent during the stall not answered 503 + Retry-After (or 2xx) within 2 s',
          value: late.length,
          goal: { text: '0', met: during.length > 0 && late.length === 0 },
        },
        secondsRow("ingest-api's first 202 after the SIGCONT", ingestBack),
        secondsRow(
          'activity-projector applying records again after the SIGCONT',
          projectorBack.ms,
          `(holding partitions: ${projectorBack.memberMs === undefined ? 'never' : `after ${sec(projectorBack.memberMs)} s`})`,
        ),
        { measure: "lines of the projector's log saying a send timed out", value: sendTimeouts },
        secondsRow('projection caught up after the load ended', outcome.caughtUpAfterLoadMs),
        noneRow('lost (accepted, no activity 120 s after the load)', outcome.lost),
        ...(outcome.lost > 0 ? [{ measure: 'of the lost, in the events log (never projected)', value: outcome.lostButInLog }] : []),
        noneRow('doubled (twice on a timeline, or one remote_id twice)', outcome.doubled),
        {
          measure: '`metrics` records above the activities',
          value: `${overRound} (${outcome.metricRecords} records, ${outcome.metricIds} ids, for ${outcome.activities} activities)`,
          goal: { text: `≤ ${RELAY_ROUND.toLocaleString('en-US')} (one relay round)`, met: overRound <= RELAY_ROUND },
        },
        { measure: 'metric events delivered more than once', value: outcome.metricDuplicates },
        { measure: 'activities without a metric event', value: outcome.metricMissing },
        { measure: 'stored though not accepted', value: outcome.storedNotAccepted, unit: '(503s or timeouts that landed: allowed)' },
      ],
      details: {
        rate,
        leadMs,
        stallMs,
        tailMs,
        times: { startedAt, stoppedAt, contAt, endedAt },
        answersByStatus,
        duringByStatus,
        // Which second of the stall the late requests were sent in: the first ones only, or all along it.
        lateBySecond: late.reduce<Record<string, number>>((a, x) => {
          const k = String(Math.floor((x.sentAt - stoppedAt) / 1000));
          a[k] = (a[k] ?? 0) + 1;
          return a;
        }, {}),
        lateSamples: late.slice(0, 20).map((a) => ({ t: a.sentAt - stoppedAt, ms: a.ms, status: a.status, retryAfter: a.retryAfter })),
        outcome,
        projectorBack,
        handledSamples: thin(projector.handled, startedAt),
      },
      notes: [
        `Load from the harness process: ${rate} single events/s, open loop, round-robin over ${PARTITIONS} shops chosen one per partition (half keyed with a remote_id, half with a contact), each request with 15 s; ingest-api and activity-projector as separate processes on their own broker (${PARTITIONS} partitions) and PostgreSQL.`,
        'SIGSTOP freezes the broker with its sockets open: connections and requests are neither refused nor answered, so clients wait for their own timeouts. The answer time of a request is from its send to its answer as this process saw it (a timeout is 15 s).',
        `The \`metrics\` goal: the records on the topic (all of them, read back) minus the activities; the relay takes ${RELAY_ROUND.toLocaleString('en-US')} outbox rows a round, so one round published twice is the most an at-least-once relay should add.`,
      ],
    };
  },
};
