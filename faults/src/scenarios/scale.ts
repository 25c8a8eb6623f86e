import {
  checkOutcome,
  describeGroup,
  endStates,
  memberOf,
  loadRows,
  PARTITIONS,
  projectorGroup,
  sleep,
  startLoad,
  startPipeline,
  statusCounts,
  untilAssigned,
  secondsRow,
} from '../groupFaults.js';
import type { ConsumerProcess, GroupView, Pipeline } from '../groupFaults.js';
import type { Context, Figures, Row, Scenario } from '../types.js';
import { byStatus, noneRow, sec, serverErrorsRow, withinRow } from '../scenarioFigures.js';

const REASSIGNED_WITHIN_MS = 10_000;

/** One change of the group's membership and how the group took it. */
interface Change {
  what: string;
  atS: number;
  /** The processes meant to be members afterwards. */
  expected: string[];
  /** From the change to the group stable with exactly those members, every partition held once. */
  assignedMs?: number;
  /** A replica added: from its spawn to its first appearance in the group's description (its join). */
  joinedMs?: number;
  /** A replica stopped with SIGTERM: how it exited and when. */
  exit?: { code: number | null; signal: string | null; afterMs: number };
  last?: GroupView;
}

/**
 * Polls the group every 250 ms from t0 until it is stable with exactly `labels`, each holding a partition and
 * all held once (60 s at most); with `joiner`, also when that process first shows in the description.
 */
async function watchGroup(p: Pipeline, labels: string[], t0: number, joiner?: string): Promise<Pick<Change, 'assignedMs' | 'joinedMs' | 'last'>> {
  let joinedMs: number | undefined;
  let last: GroupView | undefined;
  while (Date.now() - t0 < 60_000) {
    try {
      last = await describeGroup(p.admin, projectorGroup);
      if (joiner && joinedMs === undefined && memberOf(last, joiner)) joinedMs = Date.now() - t0;
      const done =
        last.state === 'Stable' &&
        last.covered &&
        last.members.length === labels.length &&
        labels.every((l) => (memberOf(last!, l)?.partitions.length ?? 0) > 0);
      if (done) return { assignedMs: Date.now() - t0, joinedMs, last };
    } catch {
      // the admin call failed this once (a busy broker); the next poll counts
    }
    await sleep(250);
  }
  return { joinedMs, last };
}

/**
 * Activity-projector replicas added and removed under load, as an operator scaling by hand or an orchestrator
 * does: a third replica added to two, one stopped cleanly (SIGTERM), another killed -9, then one added back.
 * Its own broker and PostgreSQL; ingest-api and the replicas as separate processes. Checks: nothing lost or
 * doubled, the partitions reassigned over the members meant to be there within 10 s of each change (from the
 * broker's description of the group), and the metric-event duplicates the changes cost, counted.
 */
export const scale: Scenario = {
  name: 'scale',
  description:
    'activity-projector replicas added, stopped (SIGTERM), killed -9 and added back under load: nothing lost or doubled, partitions reassigned ≤ 10 s',
  async run(ctx: Context): Promise<Figures> {
    const { rate, slotMs } = ctx.sized({ rate: [300, 300], slotMs: [20_000, 30_000] });
    const p = await startPipeline(ctx, [
      { name: 'activity-projector', label: 'projector-1' },
      { name: 'activity-projector', label: 'projector-2' },
    ]);
    const before = await untilAssigned(p.admin, projectorGroup, ['projector-1', 'projector-2'], 120_000);
    if (before.ms === undefined) throw new Error(`the two projector replicas never shared the partitions: ${JSON.stringify(before.last)}`);
    ctx.log(`two replicas hold the partitions; load starts at ${rate} events/s, a change every ${slotMs / 1000} s`);
    const load = startLoad(ctx, p, rate);
    // Faults only once ingest keeps up with the load: a figure taken from a backlog measures the machine, not the fault.
    const steadyMs = await load.steady(90_000);
    ctx.log(`ingest ${steadyMs === undefined ? 'never kept up within 90 s' : `keeping up after ${sec(steadyMs)} s`}`);
    const loadStart = Date.now();
    const running = new Map<string, ConsumerProcess>(p.consumers.map((c) => [c.label, c]));
    const changes: Change[] = [];
    const change = async (what: string, act: () => { expected: string[]; joiner?: string; exited?: Promise<Change['exit']> }) => {
      await sleep(slotMs);
      const t0 = Date.now();
      const { expected, joiner, exited } = act();
      const c: Change = { what, atS: Number(((t0 - loadStart) / 1000).toFixed(1)), expected };
      ctx.log(`${what}; waiting for ${expected.join(', ')} to hold the partitions`);
      const [seen, exit] = await Promise.all([watchGroup(p, expected, t0, joiner), exited]);
      Object.assign(c, seen, exit ? { exit } : {});
      ctx.log(`${what}: reassigned ${c.assignedMs === undefined ? 'never (60 s)' : `after ${sec(c.assignedMs)} s`}`);
      changes.push(c);
    };
    const add = (label: string) => () => {
      running.set(label, p.startConsumer('activity-projector', label));
      return { expected: [...running.keys()], joiner: label };
    };
    const stop = (label: string, signal: 'SIGTERM' | 'SIGKILL') => () => {
      const c = running.get(label)!;
      running.delete(label);
      const t0 = Date.now();
      const exited = c.service.kill(signal).then(() => ({ code: c.service.process.exitCode, signal: c.service.process.signalCode, afterMs: Date.now() - t0 }));
      return { expected: [...running.keys()], exited };
    };
    const order = ctx.random() < 0.5 ? ['projector-1', 'projector-2'] : ['projector-2', 'projector-1'];
    await change('projector-3 added', add('projector-3'));
    await change(`${order[0]} stopped (SIGTERM)`, stop(order[0], 'SIGTERM'));
    await change(`${order[1]} killed -9`, stop(order[1], 'SIGKILL'));
    await change('projector-4 added', add('projector-4'));
    await sleep(slotMs);
    const { startedAt, endedAt } = await load.stop();
    ctx.log(`load stopped: ${load.sent()} sent, ${load.accepted.length} accepted`);
    const outcome = await checkOutcome(ctx, p, load.accepted, endedAt);
    const ends = await endStates(p.admin, [...running.values()]);
    const notWorking = ends.filter((e) => !e.working);
    const answersByStatus = statusCounts(load.answers);
    const loadS = (endedAt - startedAt) / 1000;

    const changeRows: Row[] = changes.map((c) =>
      c.joinedMs !== undefined || c.what.endsWith('added')
        ? {
            ...withinRow(
              `partitions reassigned after ${c.what}, from its join`,
              c.assignedMs === undefined || c.joinedMs === undefined ? undefined : c.assignedMs - c.joinedMs,
              REASSIGNED_WITHIN_MS,
            ),
            unit: `s (joined ${sec(c.joinedMs)} s after its spawn, all reassigned ${sec(c.assignedMs)} s after it)`,
          }
        : {
            ...withinRow(`partitions reassigned after ${c.what}`, c.assignedMs, REASSIGNED_WITHIN_MS),
            ...(c.exit ? { unit: `s (it exited ${c.exit.code ?? c.exit.signal} after ${sec(c.exit.afterMs)} s)` } : {}),
          },
    );
    return {
      versions: p.versions,
      rows: [
        ...loadRows(load, rate, loadS, steadyMs),
        { measure: 'changes', value: changes.map((c) => `${c.what} at ${c.atS} s`).join('; ') },
        { measure: 'events accepted', value: load.accepted.length },
        { measure: 'answers by status', value: byStatus(answersByStatus) },
        serverErrorsRow(answersByStatus),
        ...changeRows,
        secondsRow('projection caught up after the load ended', outcome.caughtUpAfterLoadMs),
        noneRow('lost (accepted, no activity 120 s after the load)', outcome.lost),
        ...(outcome.lost > 0 ? [{ measure: 'of the lost, in the events log (never projected)', value: outcome.lostButInLog }] : []),
        noneRow('doubled (twice on a timeline, or one remote_id twice)', outcome.doubled),
        {
          measure: 'metric events delivered more than once',
          value: outcome.metricDuplicates,
          unit: `(${outcome.metricRecords} records, ${outcome.metricIds} ids, for ${outcome.activities} activities)`,
        },
        { measure: 'activities without a metric event', value: outcome.metricMissing },
        {
          measure: 'replicas not working at the end (alive but idle, or exited)',
          value: notWorking.length === 0 ? 0 : notWorking.map((e) => `${e.label} (healthz ${e.healthz}, ${e.partitions.length} partitions)`).join('; '),
        },
        { measure: 'stored though not accepted', value: outcome.storedNotAccepted, unit: '(timeouts that landed: allowed)' },
      ],
      details: { rate, slotMs, changes, answersByStatus, outcome, ends },
      notes: [
        `Load from the harness process: ${rate} single events/s, open loop, round-robin over ${PARTITIONS} shops chosen one per partition (half keyed with a remote_id, half with a contact); ingest-api and the activity-projector replicas as separate processes on their own broker (${PARTITIONS} partitions) and PostgreSQL; a change every ${slotMs / 1000} s.`,
        "Reassigned: the broker's description of the group (admin describeGroups, every 250 ms) is Stable with exactly the replicas meant to run, each holding a partition and every partition held once. A replica added is timed from its join (its first appearance in the description), its boot shown beside; one stopped or killed from the signal.",
        `A replica killed -9 leaves its member in the group until its session (KAFKA_SESSION_TIMEOUT_MS, 8 s) runs out: the floor of that change's time.`,
      ],
    };
  },
};
