import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, openSync, closeSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { queryRows, sql, type Db } from '@shopstream/db';
import { fromSource, until } from '../services.js';
import { EventLoad, healthz, lastCheckpoint, missingOf, sleep, startPipeline, storedEvents, type LoadEvent } from '../starveRebuildPipeline.js';
import type { Context, Figures, Scenario } from '../types.js';
import { byStatus, noneRow, sec } from '../scenarioFigures.js';

const PROJECTOR = 'activity-projector';
const LIVE_GROUP = 'shopstream.activity-projector';
/** How long a rebuild may go on after losing its consumer (issue 22): completed, or exited non-zero, by then. */
const LOST_CONSUMER_EXIT_MS = 30_000;
/** A log line of a consumer that stopped for good (kafkajs' crash, an expelled member). */
const CONSUMER_LOST = /consumer crashed|not aware of this member|UNKNOWN_MEMBER_ID|fenced/i;

type Fault = 'kill -9 the rebuild' | 'kill -9 the live projector' | 'none';

interface RebuildRun {
  index: number;
  fault: Fault;
  /** Tries answered "another rebuild is running" (exit 2) before this one started. */
  refused: number;
  startedAtS: number;
  durationS?: number;
  exit?: string;
  outcome?: string;
  /** When the fault was injected, seconds from the rebuild's start, and the records it had applied by then. */
  faultAtS?: number;
  faultAtApplied?: number;
  /** The rebuild's consumer gone: a crash line in its output, or its count still for 30 s while the live projector moved on. */
  lostConsumer?: { how: string; atS: number };
  /** From losing its consumer to its exit (undefined: it never exited by itself). */
  exitAfterLossS?: number;
  /** Still running at the scenario's cap: killed -9 by the harness. */
  hung?: boolean;
  /** The live projector after its kill: from the restart to its first checkpoint. */
  projectorApplyingAgainS?: number;
  /** rebuild_* and retired_* schemas left once this rebuild had ended. */
  schemasAfter: string[];
  /** When its output said it booted, began switching, switched: seconds from the start of the reads. */
  phasesAtS: Record<string, number>;
  logFile: string;
  lastLines: string[];
}

const md5 = (lines: string[]) => createHash('md5').update(lines.join('\n')).digest('hex');

/** Rows that differ between what the events say and what the tables hold, either way, and each side's checksum. */
function compare(expected: string[], actual: string[]) {
  const e = [...expected].sort();
  const a = [...actual].sort();
  const inA = new Map<string, number>();
  for (const x of a) inA.set(x, (inA.get(x) ?? 0) + 1);
  let differing = 0;
  for (const x of e) {
    const n = inA.get(x) ?? 0;
    if (n === 0) differing++;
    else inA.set(x, n - 1);
  }
  for (const n of inA.values()) differing += n;
  return { differing, expected: md5(e), actual: md5(a), rows: a.length };
}

/** The activity projection's tables against the accepted events: one activity each (id, contact, name, metric, remote id), one timeline row per event with a contact. */
async function checksums(db: Db, shopId: string, events: LoadEvent[]) {
  const activities = await queryRows(
    db,
    sql`SELECT id::text || '|' || coalesce(contact_id::text, '-') || '|' || name || '|' || (metric->>'metric_name') || '|' || coalesce(remote_id, '-') AS line
        FROM activities WHERE shop_id = ${shopId}`,
    (r) => String(r.line),
  );
  const timeline = await queryRows(db, sql`SELECT contact_id::text || '|' || activity_id::text AS line FROM contact_timeline WHERE shop_id = ${shopId}`, (r) =>
    String(r.line),
  );
  const want = events.map((e) => `${e.activityId}|${e.contactId ?? '-'}|${e.body.name}|${e.body.metric.metric_name}|${e.body.remote_id}`);
  const wantTimeline = events.filter((e) => e.contactId !== undefined).map((e) => `${e.contactId}|${e.activityId}`);
  return { activities: compare(want, activities), timeline: compare(wantTimeline, timeline) };
}

async function leftSchemas(db: Db): Promise<string[]> {
  return queryRows(db, sql`SELECT nspname FROM pg_namespace WHERE nspname LIKE 'rebuild\_%' OR nspname LIKE 'retired\_%' ORDER BY 1`, (r) => String(r.nspname));
}

/**
 * Three `pnpm cli projections rebuild activity-projector --yes` in a row (the CLI from its build, as the services
 * run) under reads (the workspace's activity list, one activity, a contact's timeline) and live writes: the rebuild
 * process killed -9 during the first, the live projector killed -9 (and started again) during the second, the
 * third left alone. Its own PostgreSQL and broker; ingest-api, activity-projector and query-api as processes.
 */
export const rebuildUnderLoad: Scenario = {
  name: 'rebuild-under-load',
  description:
    'three activity-projector rebuilds under 40 reads/s and writes, one rebuild and one live projector killed -9: no failed read, rebuilt rows = events, no orphan schema',
  async run(ctx: Context): Promise<Figures> {
    const { preload, writeRate, readRate, capMs } = ctx.sized({
      preload: [30_000, 100_000],
      writeRate: [50, 100],
      readRate: [40, 40],
      capMs: [240_000, 420_000], // a rebuild still running then is taken as hung and killed
    });
    const p = await startPipeline(ctx, ['ingest-api', 'query-api', PROJECTOR]);
    const db = p.pg.db;
    const load = new EventLoad(ctx, () => p.current['ingest-api'].baseUrl, p.headers, { contactShare: 0.6, contacts: 500, bulkSize: 10 });

    const t0 = Date.now();
    await load.preload(preload);
    ctx.log(`preloaded ${load.accepted.length} events in ${sec(Date.now() - t0)} s; waiting for the projection`);
    const preIds = load.accepted.map((e) => e.activityId!);
    await until(async () => (await missingOf(db, p.shopId, preIds)) === 0, 300_000, 'preload projected', 500);
    const before = await checksums(db, p.shopId, load.accepted);
    ctx.log(`preload projected: activities differing ${before.activities.differing}, timeline ${before.timeline.differing}`);

    // ---- reads: open loop, the three kinds in turn, on ids the harness knows ----
    type ReadKind = 'workspace list' | 'one activity' | 'contact timeline';
    const KINDS: ReadKind[] = ['workspace list', 'one activity', 'contact timeline'];
    const reads: Record<ReadKind, Record<string, number>> = { 'workspace list': {}, 'one activity': {}, 'contact timeline': {} };
    const failedReads: { atS: number; kind: ReadKind; status: string; code?: string; message?: string; rebuild?: number }[] = [];
    let readMaxMs = 0;
    const readWindows: { ok: number; failed: Record<string, number>; maxMs: number }[] = [];
    let currentRebuild: number | undefined;
    const readable = load.accepted;
    const withContact = readable.filter((e) => e.contactId !== undefined);
    const pick = <T>(xs: T[]) => xs[Math.floor(ctx.random() * xs.length)];
    const readOne = async (i: number) => {
      const kind = KINDS[i % KINDS.length];
      const q = p.current['query-api'].baseUrl;
      const url =
        kind === 'workspace list'
          ? `${q}/v2026-04/activities/?scope=workspace`
          : kind === 'one activity'
            ? `${q}/v2026-04/activities/${pick(readable).activityId}/`
            : `${q}/v2026-04/contacts/${pick(withContact).contactId}/timeline/`;
      const t = Date.now();
      let status = 'error';
      let body: any;
      try {
        const res = await fetch(url, { headers: p.headers, signal: AbortSignal.timeout(15_000) });
        status = String(res.status);
        body = await res.json().catch(() => undefined);
      } catch (e: any) {
        status = e?.name === 'TimeoutError' ? 'timeout' : String(e?.cause?.code ?? 'error');
      }
      readMaxMs = Math.max(readMaxMs, Date.now() - t);
      // Per 5 s of the run, by when each read was sent: where the failures fall against the rebuilds' phases.
      const w = (readWindows[Math.floor((t - loadStart) / 5_000)] ??= { ok: 0, failed: {}, maxMs: 0 });
      w.maxMs = Math.max(w.maxMs, Date.now() - t);
      if (/^2/.test(status)) w.ok++;
      else w.failed[status] = (w.failed[status] ?? 0) + 1;
      reads[kind][status] = (reads[kind][status] ?? 0) + 1;
      if (!/^2/.test(status) && failedReads.length < 50)
        failedReads.push({ atS: (t - loadStart) / 1000, kind, status, code: body?.error?.code, message: body?.error?.message, rebuild: currentRebuild });
    };
    let reading = true;
    const readsInflight = new Set<Promise<void>>();
    const loadStart = Date.now();
    const reader = (async () => {
      let n = 0;
      while (reading) {
        while (n < Math.floor(((Date.now() - loadStart) / 1000) * readRate)) {
          const r = readOne(n++);
          readsInflight.add(r);
          void r.finally(() => readsInflight.delete(r));
        }
        await sleep(10);
      }
    })();
    load.start(writeRate);
    ctx.log(`reads at ${readRate}/s and writes at ${writeRate} events/s started`);
    await sleep(3_000);

    // ---- the rebuilds ----
    const logDir = path.join(os.tmpdir(), 'shopstream-faults');
    mkdirSync(logDir, { recursive: true });
    const cliArgs = ['projections', 'rebuild', PROJECTOR, '--yes'];
    const cli = fromSource
      ? ['--conditions=@shopstream/source', '--import', 'tsx', 'services/cli/src/main.ts', ...cliArgs]
      : ['services/cli/dist/main.js', ...cliArgs];
    /**
     * The records applied by the rebuild this process started: its row, not one a killed rebuild left 'running'
     * (the same host's clock, so a row started before the process was spawned is not its).
     */
    const runningApplied = async (spawnedAt: number): Promise<number | undefined> => {
      const [r] = await db.query(
        sql`SELECT applied FROM projection_rebuilds WHERE projection = ${PROJECTOR} AND status = 'running'
            AND started_at >= to_timestamp(${spawnedAt / 1000}::float8) ORDER BY started_at DESC LIMIT 1`,
      );
      return r === undefined ? undefined : Number(r.applied);
    };

    /** One CLI process to its end: its exit, when it said its consumer was gone, the last lines it wrote. */
    const attempt = (logFile: string, onLine: (line: string) => void) => {
      const fd = openSync(logFile, 'a');
      const child = spawn(process.execPath, cli, {
        cwd: ctx.repoRoot,
        env: { ...process.env, ...p.env, LOG_LEVEL: 'info' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      ctx.defer(() => void child.kill('SIGKILL'));
      let partial = '';
      const take = (chunk: Buffer) => {
        writeSync(fd, chunk);
        const text = partial + chunk.toString('utf8');
        const lines = text.split('\n');
        partial = lines.pop() ?? '';
        for (const l of lines) onLine(l);
      };
      child.stdout.on('data', take);
      child.stderr.on('data', take);
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
        child.once('exit', (code, signal) => {
          if (partial) onLine(partial);
          closeSync(fd);
          r({ code, signal });
        }),
      );
      return { child, exited };
    };

    const runs: RebuildRun[] = [];
    const faults: Fault[] = ['kill -9 the rebuild', 'kill -9 the live projector', 'none'];
    for (const [index, fault] of faults.entries()) {
      currentRebuild = index;
      const logFile = path.join(logDir, `rebuild-${index}-${process.pid}-${Date.now()}.log`);
      const run: RebuildRun = { index, fault, refused: 0, startedAtS: 0, schemasAfter: [], phasesAtS: {}, logFile, lastLines: [] };
      runs.push(run);
      // A fraction of the rebuild at which the fault comes: somewhere in its first two thirds.
      const faultAt = Math.floor(load.accepted.length * (0.2 + 0.45 * ctx.random()));
      let startedAt = 0;
      let result: { code: number | null; signal: NodeJS.Signals | null };
      const refusedSince = Date.now();
      // Once per rebuild, whichever of its tries (a refused one included) reaches the moment.
      let faulted = false;
      for (;;) {
        let refusedLine = false;
        startedAt = Date.now();
        run.startedAtS = (startedAt - loadStart) / 1000;
        const lines: string[] = [];
        const a = attempt(logFile, (l) => {
          lines.push(l);
          if (lines.length > 30) lines.shift();
          if (/Another rebuild of/.test(l)) refusedLine = true;
          const phase = /caught up: switching|: switched|switched to the new generation|bootstrap API keys ensured/.exec(l)?.[0];
          if (phase && !(phase in run.phasesAtS)) run.phasesAtS[phase] = Number(((Date.now() - loadStart) / 1000).toFixed(1));
          if (!run.lostConsumer && CONSUMER_LOST.test(l))
            run.lostConsumer = { how: 'a consumer-crash line in its output', atS: (Date.now() - startedAt) / 1000 };
        });
        ctx.log(`rebuild ${index + 1} (${fault}) started, pid ${a.child.pid}${run.refused > 0 ? ` after ${run.refused} refusals` : ''}`);
        let ended: { code: number | null; signal: NodeJS.Signals | null } | undefined;
        void a.exited.then((r) => (ended = r));
        let lastApplied = -1;
        let lastChangeAt = Date.now();
        while (!ended) {
          const applied = await runningApplied(startedAt).catch(() => undefined);
          if (applied !== undefined && applied !== lastApplied) {
            lastApplied = applied;
            lastChangeAt = Date.now();
          }
          // Stalled: the count still for 30 s while live writes go on (the rebuild applies up to the live checkpoint);
          // counted from its row's first count, not from the spawn (the CLI takes a while to boot on a busy machine).
          if (
            !run.lostConsumer &&
            !(faulted && fault === 'kill -9 the rebuild') &&
            lastApplied >= 0 &&
            Date.now() - lastChangeAt > LOST_CONSUMER_EXIT_MS &&
            (await lastCheckpoint(db, LIVE_GROUP)) > lastChangeAt
          )
            run.lostConsumer = { how: 'its applied count still for 30 s while the live projector moved on', atS: (lastChangeAt - startedAt) / 1000 };
          if (!faulted && fault !== 'none' && applied !== undefined && applied >= faultAt) {
            faulted = true;
            run.faultAtS = (Date.now() - startedAt) / 1000;
            run.faultAtApplied = applied;
            if (fault === 'kill -9 the rebuild') {
              a.child.kill('SIGKILL');
              ctx.log(`rebuild ${index + 1}: killed -9 at ${applied} records applied`);
            } else {
              await p.current[PROJECTOR].kill('SIGKILL');
              const restartedAt = Date.now();
              const s = p.restart(PROJECTOR);
              ctx.log(`rebuild ${index + 1}: live projector killed -9 at ${applied} records applied; started again as pid ${s.process.pid}`);
              void until(async () => (await lastCheckpoint(db, LIVE_GROUP)) > restartedAt, 120_000, 'projector applying', 200)
                .then((ms) => (run.projectorApplyingAgainS = ms / 1000))
                .catch(() => undefined);
            }
          }
          if (Date.now() - startedAt > capMs) {
            run.hung = true;
            a.child.kill('SIGKILL');
            ctx.log(`rebuild ${index + 1}: still running after ${capMs / 1000} s: killed -9 as hung`);
          }
          await sleep(250);
        }
        result = await a.exited;
        run.lastLines = lines.slice(-10);
        if (result.code === 2 && refusedLine && Date.now() - refusedSince < 120_000) {
          run.refused++;
          await sleep(3_000);
          continue;
        }
        break;
      }
      const endedAt = Date.now();
      run.durationS = (endedAt - startedAt) / 1000;
      run.exit = result.signal ? `killed (${result.signal})` : `exit ${result.code}`;
      run.outcome = run.hung
        ? 'hung, killed by the harness'
        : fault === 'kill -9 the rebuild' && result.signal === 'SIGKILL'
          ? 'killed -9 by the scenario'
          : result.code === 0
            ? 'completed'
            : `failed (exit ${result.code})`;
      if (run.lostConsumer && !run.hung && !(fault === 'kill -9 the rebuild' && result.signal === 'SIGKILL'))
        run.exitAfterLossS = Number((run.durationS - run.lostConsumer.atS).toFixed(1));
      run.schemasAfter = await leftSchemas(db);
      ctx.log(`rebuild ${index + 1}: ${run.outcome} after ${sec(endedAt - startedAt)} s; schemas left: ${run.schemasAfter.join(', ') || 'none'}`);
    }
    currentRebuild = undefined;
    await sleep(3_000);
    await load.stop();
    reading = false;
    await reader;
    while (readsInflight.size > 0) await Promise.allSettled([...readsInflight]);
    const loadEnd = Date.now();
    ctx.log(`load stopped: ${load.accepted.length} events accepted; waiting for the projection`);

    const ids = load.accepted.map((e) => e.activityId!);
    let caughtUpMs: number | undefined;
    try {
      caughtUpMs = await until(async () => (await missingOf(db, p.shopId, ids)) === 0, 120_000, 'caught up', 500);
    } catch {
      caughtUpMs = undefined;
    }
    const stored = await storedEvents(db, p.shopId, load);
    const after = await checksums(db, p.shopId, load.accepted);
    const projectorHealth = await healthz(p.current[PROJECTOR]);

    const allReads = Object.values(reads).reduce<Record<string, number>>((acc, s) => {
      for (const [k, n] of Object.entries(s)) acc[k] = (acc[k] ?? 0) + n;
      return acc;
    }, {});
    const readCount = Object.values(allReads).reduce((a, b) => a + b, 0);
    const non2xx = Object.entries(allReads)
      .filter(([s]) => !/^2/.test(s))
      .reduce((a, [, n]) => a + n, 0);
    const killedRun = runs.findIndex((r) => r.fault === 'kill -9 the rebuild');
    const afterNext = runs.filter((r) => r.index > killedRun);
    const orphanAfterNext = afterNext.length === 0 ? undefined : afterNext[0].schemasAfter.length;
    const notEnded = runs.filter(
      (r) =>
        r.hung ||
        (r.lostConsumer !== undefined &&
          (r.exitAfterLossS === undefined || r.exitAfterLossS * 1000 > LOST_CONSUMER_EXIT_MS) &&
          r.outcome !== 'killed -9 by the scenario'),
    );
    const loadS = (loadEnd - loadStart) / 1000;

    return {
      versions: { kafka: p.kafka.version, postgres: p.pg.version },
      rows: [
        { measure: 'events before the rebuilds (preloaded)', value: preIds.length },
        {
          measure: 'load held during the rebuilds',
          value: `${Math.round(readCount / loadS)} reads/s and ${Math.round((load.events.length - preload) / loadS)} events/s for ${Math.round(loadS)} s`,
        },
        ...runs.map((r) => ({
          measure: `rebuild ${r.index + 1} (${r.fault})`,
          value:
            `${r.outcome}, ${r.exit}, ${r.durationS} s` +
            (r.faultAtS !== undefined ? `; fault at ${r.faultAtS.toFixed(1)} s (${r.faultAtApplied} applied)` : '') +
            (r.refused > 0 ? `; refused ${r.refused}× first` : '') +
            (r.lostConsumer ? `; consumer lost at ${r.lostConsumer.atS.toFixed(1)} s (${r.lostConsumer.how})` : '') +
            (r.projectorApplyingAgainS !== undefined ? `; live projector applying ${r.projectorApplyingAgainS.toFixed(1)} s after its restart` : ''),
        })),
        { measure: 'reads by status (workspace list; one activity; contact timeline)', value: KINDS.map((k) => byStatus(reads[k]) || '-').join('; ') },
        noneRow('reads not 2xx', non2xx),
        { measure: 'slowest read', value: sec(readMaxMs), unit: 's' },
        noneRow('lost (accepted, no activity)', stored.lost),
        noneRow('doubled (an event stored twice, or twice on a timeline)', stored.doubled),
        {
          measure: 'activities, timeline rows differing from the events after the rebuilds (checksums tables / events)',
          value: `${after.activities.differing}, ${after.timeline.differing} (${after.activities.actual.slice(0, 8)}/${after.activities.expected.slice(0, 8)}, ${after.timeline.actual.slice(0, 8)}/${after.timeline.expected.slice(0, 8)})`,
          goal: { text: '0, 0', met: after.activities.differing === 0 && after.timeline.differing === 0 },
        },
        {
          measure: 'rebuild_* / retired_* schemas left after each rebuild',
          value: runs.map((r) => `${r.index + 1}: ${r.schemasAfter.length > 0 ? r.schemasAfter.join(' ') : 'none'}`).join('; '),
          goal: { text: 'none after the next rebuild', met: orphanAfterNext === 0 && runs.at(-1)!.schemasAfter.length === 0 },
        },
        noneRow('rebuilds neither completed nor exited non-zero ≤ 30 s after losing their consumer', notEnded.length),
        { measure: 'caught up after the load', value: sec(caughtUpMs), unit: 's' },
        { measure: 'live projector healthz at the end', value: projectorHealth },
        { measure: 'ingest answers by status', value: byStatus(load.statuses) },
      ],
      details: {
        preload,
        writeRate,
        readRate,
        capMs,
        runs,
        reads,
        failedReads,
        readWindows: readWindows.map((w, i) => ({ fromS: i * 5, ...w })),
        before,
        after,
        lostSample: stored.lostSample,
        logs: Object.fromEntries(Object.entries(p.current).map(([n, s]) => [n, s.logFile])),
      },
      notes: [
        `${preIds.length.toLocaleString('en-US')} keyed events (60% with a contact, 500 contacts) preloaded and projected before the rebuilds; then the harness reads at ${readRate}/s, open loop, in turn the workspace's activity list, one activity and a contact's timeline (15 s timeout each), and writes ${writeRate} keyed events/s in bulks of 10 until the third rebuild has ended.`,
        `Each rebuild is \`node ${cli.slice(0, fromSource ? 4 : 1).join(' ')} ${cliArgs.join(' ')}\`; one answered "another rebuild is running" (exit 2) is tried again 3 s later, the refusals counted. Its fault comes when projection_rebuilds.applied (renewed every 2 s) passes a seeded 20-65% of the events; the live projector is started again at once on its port.`,
        `Losing its consumer: a consumer-crash line in the rebuild's output, or its applied count still for 30 s while the live projector's checkpoints moved (the rebuild applies up to them). A rebuild running ${capMs / 1000} s is taken as hung and killed.`,
        'Checksums: md5 of the sorted rows (activities: id, contact id, name, metric name, remote id; timeline: contact id, activity id) against the same lines built from what ingest answered for each accepted event.',
      ],
    };
  },
};
