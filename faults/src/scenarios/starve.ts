import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { headers as H, schemas, topics } from '@shopstream/contracts';
import { sql } from '@shopstream/db';
import { until } from '../services.js';
import {
  EventLoad,
  groupAssignment,
  healthz,
  lagOf,
  lastCheckpoint,
  missingOf,
  sleep,
  startPipeline,
  storedEvents,
  topicRecords,
} from '../starveRebuildPipeline.js';
import type { Context, Figures, Row, Scenario } from '../types.js';
import { byStatus, noneRow, sec, withinRow } from '../scenarioFigures.js';

const CONSUMERS = [
  { service: 'activity-projector', group: 'shopstream.activity-projector', topic: topics.events },
  { service: 'flow-matcher', group: 'shopstream.flow-matcher', topic: topics.metrics },
  { service: 'conversation-projector', group: 'shopstream.conversation-projector', topic: topics.conversations },
] as const;
/** The services' share of the machine while starved, when a cpu cgroup can be made. */
const CGROUP_PERCENT = 10;
/** The outbox relay's round (packages/projections/src/outbox.ts): a round sent again whole is the most `metrics` may exceed the activities by. */
const RELAY_ROUND = 5_000;

/** A busy loop at nice -5 (the services run at 0): it takes its core from them. Killed by its pid. */
function cpuHog(): ChildProcess {
  return spawn('nice', ['-n', '-5', 'sh', '-c', 'while :; do :; done'], { stdio: 'ignore' });
}

const CPU_CGROUP = '/sys/fs/cgroup/cpu';

/**
 * The services' processes moved into a cgroup (v1 cpu controller, as mounted here; v2 has no cpu controller
 * here) whose CFS quota is `percent` % of the whole machine: starved whatever else runs beside them. Undefined
 * when the cgroup cannot be made (not root, not mounted); release() moves them back and removes it.
 */
function cpuLimit(pids: number[], percent: number): { path: string; throttled: Record<string, number>; release(): void } | undefined {
  const dir = path.join(CPU_CGROUP, `shopstream-faults-starve-${process.pid}`);
  try {
    mkdirSync(dir);
    const period = Number(readFileSync(path.join(dir, 'cpu.cfs_period_us'), 'utf8'));
    writeFileSync(path.join(dir, 'cpu.cfs_quota_us'), String(Math.round((period * os.cpus().length * percent) / 100)));
    for (const pid of pids) writeFileSync(path.join(dir, 'cgroup.procs'), String(pid));
  } catch {
    try {
      for (const pid of pids) writeFileSync(path.join(CPU_CGROUP, 'cgroup.procs'), String(pid));
      rmdirSync(dir);
    } catch {
      // nothing made, nothing to undo
    }
    return undefined;
  }
  let released = false;
  const limit = {
    path: dir,
    /** The cgroup's cpu.stat as it was released: how often and how long the quota held the services back. */
    throttled: {} as Record<string, number>,
    release() {
      if (released) return;
      released = true;
      try {
        for (const line of readFileSync(path.join(dir, 'cpu.stat'), 'utf8').split('\n')) {
          const [k, v] = line.split(' ');
          if (k) limit.throttled[k] = Number(v);
        }
      } catch {
        // no figures
      }
      // A process that exited meanwhile has left the cgroup already: each move on its own.
      for (const pid of readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) {
        try {
          writeFileSync(path.join(CPU_CGROUP, 'cgroup.procs'), pid);
        } catch {
          // gone
        }
      }
      rmdirSync(dir);
    },
  };
  return limit;
}

/** The nice value the kernel gives a process (field 19 of /proc/<pid>/stat), to show the hog got its priority. */
function niceOf(pid: number | undefined): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
  } catch {
    return undefined;
  }
}

/**
 * The whole pipeline (ingest-api, query-api, activity-projector, flow-matcher, conversation-projector, each its
 * own process, on its own PostgreSQL and broker) under a steady load of events and conversation records, while
 * two busy loops at nice -5 take both cores for a while. Afterwards every consumer must be applying again soon,
 * none left "alive but idle" (healthz 200, its group's partitions all assigned, its lag down to 0), nothing lost
 * or doubled, and `metrics` no more than one relay round above the activities.
 */
export const starve: Scenario = {
  name: 'starve',
  description: 'two nice -5 busy loops take both cores for 60 s under load: consumers applying ≤ 10 s after, none alive but idle, nothing lost or doubled',
  async run(ctx: Context): Promise<Figures> {
    const { rate, convRate, leadMs, starveMs, afterMs } = ctx.sized({
      rate: [100, 200],
      convRate: [5, 10],
      leadMs: [10_000, 20_000],
      starveMs: [25_000, 60_000],
      afterMs: [20_000, 30_000],
    });
    const p = await startPipeline(ctx, ['ingest-api', 'query-api', 'activity-projector', 'flow-matcher', 'conversation-projector']);
    const db = p.pg.db;
    const queryUrl = p.current['query-api'].baseUrl;

    // One flow, so the matcher writes triggers and not only checkpoints.
    const flowRes = await fetch(`${queryUrl}/v2026-04/flows/`, {
      method: 'POST',
      headers: p.headers,
      body: JSON.stringify({ name: 'any order', trigger: { metric_name: 'placed_order' } }),
    });
    if (flowRes.status !== 201 && flowRes.status !== 200) throw new Error(`creating the flow: ${flowRes.status} ${await flowRes.text()}`);

    const load = new EventLoad(ctx, () => p.current['ingest-api'].baseUrl, p.headers, { contactShare: 0.5, contacts: 2_000, bulkSize: 10 });
    // Conversation records straight to their topic, as `pnpm cli conversations import` sends them.
    const producer = new Kafka({ clientId: 'faults-conversations', brokers: p.kafka.brokers, logLevel: logLevel.NOTHING }).producer();
    await producer.connect();
    ctx.defer(() => producer.disconnect().catch(() => {}));
    const conversationIds: string[] = [];
    let convFailures = 0;
    const publishConversation = async (n: number) => {
      const id = randomUUID();
      const at = new Date(Date.now() - 3_600_000 + n).toISOString();
      const conv = {
        id,
        agent_id: randomUUID(),
        contact_id: randomUUID(),
        user_id: null,
        created_at: at,
        updated_at: at,
        flags: [],
        tags: ['faults'],
        intent: {},
        topic: {},
        title: `conversation ${n}`,
        type: 'web_chat',
        status: 'open',
      };
      const value = { type: 'conversation.upserted', shop_id: p.shopId, conversation: conv };
      try {
        await producer.send({
          topic: topics.conversations,
          acks: -1,
          messages: [
            {
              key: p.shopId,
              value: JSON.stringify(value),
              headers: { [H.contentType]: 'application/json', [H.schema]: schemas.conversationRecord, [H.shopId]: p.shopId },
            },
          ],
        });
        conversationIds.push(id);
      } catch {
        convFailures++;
      }
    };
    let convOn = true;
    const convLoop = (async () => {
      const t0 = Date.now();
      let n = 0;
      while (convOn) {
        while (n < Math.floor(((Date.now() - t0) / 1000) * convRate)) void publishConversation(n++);
        await sleep(100);
      }
    })();

    // Each consumer's last checkpoint and process state once a second: the raw course of the run.
    const samples: { t: number; checkpoints: Record<string, number>; running: Record<string, boolean> }[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const checkpoints: Record<string, number> = {};
        for (const c of CONSUMERS) checkpoints[c.service] = await lastCheckpoint(db, c.group).catch(() => -1);
        const running = Object.fromEntries(Object.entries(p.current).map(([n, s]) => [n, s.process.exitCode === null && s.process.signalCode === null]));
        samples.push({ t: Date.now(), checkpoints, running });
        await sleep(1_000);
      }
    })();

    load.start(rate);
    const loadStart = Date.now();
    ctx.log(`load: ${rate} events/s and ${convRate} conversations/s; CPU hogs in ${leadMs / 1000} s for ${starveMs / 1000} s`);
    await sleep(leadMs);
    const hogs = [cpuHog(), cpuHog()];
    ctx.defer(() => void hogs.forEach((h) => h.kill('SIGKILL')));
    const limit = cpuLimit(
      Object.values(p.current).map((sv) => sv.process.pid!),
      CGROUP_PERCENT,
    );
    if (limit) ctx.defer(() => limit.release());
    const starvedAt = Date.now();
    await sleep(500);
    const hogNice = hogs.map((h) => niceOf(h.pid));
    ctx.log(
      `CPU hogs running (pids ${hogs.map((h) => h.pid).join(', ')}, nice ${hogNice.join(', ')}); services ${limit ? `in ${limit.path}, ${CGROUP_PERCENT} % of the machine` : 'not limited (no writable cpu cgroup)'}`,
    );
    await sleep(starveMs - 500);
    for (const h of hogs) h.kill('SIGKILL');
    limit?.release();
    const fedAt = Date.now();
    const acceptedAtFed = load.accepted.length;
    ctx.log('CPU hogs killed');

    // Applying again: the first checkpoint each consumer writes after the hogs are gone (the load goes on).
    const applyingAgain: Record<string, number | undefined> = {};
    const watchers = CONSUMERS.map(async (c) => {
      try {
        await until(async () => (await lastCheckpoint(db, c.group)) > fedAt, 120_000, `${c.service} applying`, 100);
        applyingAgain[c.service] = (await lastCheckpoint(db, c.group)) - fedAt;
      } catch {
        applyingAgain[c.service] = undefined;
      }
    });
    await sleep(afterMs);
    await load.stop();
    convOn = false;
    await convLoop;
    const loadEnd = Date.now();
    await Promise.all(watchers);
    ctx.log(`load stopped: ${load.events.length} events generated, ${load.accepted.length} accepted; waiting for the consumers to catch up`);

    // Caught up: every accepted event an activity and every group's lag 0, within 120 s of the load's end.
    const ids = load.accepted.map((e) => e.activityId!);
    const lags = async () =>
      Object.fromEntries(await Promise.all(CONSUMERS.map(async (c) => [c.service, await lagOf(p.admin, db, c.group, c.topic)] as const)));
    let caughtUpMs: number | undefined;
    try {
      await until(async () => (await missingOf(db, p.shopId, ids)) === 0 && Object.values(await lags()).every((l) => l === 0), 120_000, 'caught up', 500);
      caughtUpMs = Date.now() - loadEnd;
    } catch {
      caughtUpMs = undefined;
    }
    // The relay publishes a moment after each commit: let the metrics topic settle before counting it.
    await sleep(3_000);
    sampling = false;
    await sampler;

    const stored = await storedEvents(db, p.shopId, load);
    const endLags = await lags();
    const consumerEnd = await Promise.all(
      CONSUMERS.map(async (c) => {
        const s = p.current[c.service];
        const alive = s.process.exitCode === null && s.process.signalCode === null;
        const health = alive ? await healthz(s) : `exited ${s.process.exitCode ?? s.process.signalCode}`;
        const g = await groupAssignment(p.admin, c.group, c.topic).catch((e) => ({ state: `unknown (${String(e)})`, members: 0, assigned: 0, partitions: -1 }));
        const idle = health !== '200' || g.assigned !== g.partitions || endLags[c.service] !== 0;
        return { ...c, alive, health, group: g, lag: endLags[c.service], idle };
      }),
    );
    const ingestHealth = await healthz(p.current['ingest-api']);
    const metricsRecords = await topicRecords(p.admin, topics.metrics);
    const [act] = await db.query(sql`SELECT count(*)::int AS n FROM activities WHERE shop_id = ${p.shopId}`);
    const activities = Number(act.n);
    const [conv] = await db.query(sql`SELECT count(*)::int AS n FROM conversations WHERE shop_id = ${p.shopId} AND id = ANY(${conversationIds}::uuid[])`);
    const crashLines = Object.fromEntries(
      CONSUMERS.map((c) => {
        let n = 0;
        try {
          n = readFileSync(p.current[c.service].logFile, 'utf8')
            .split('\n')
            .filter((l) => /crashed|not aware of this member|UNKNOWN_MEMBER_ID/i.test(l)).length;
        } catch {
          // no log: none counted
        }
        return [c.service, n];
      }),
    );
    const loadS = (loadEnd - loadStart) / 1000;

    const rows: Row[] = [
      {
        measure: 'load held',
        value: `${Math.round(load.events.length / loadS)} events/s (bulks of 10, keyed, half with a contact) and ${convRate} conversations/s for ${Math.round(loadS)} s`,
      },
      {
        measure: 'fault',
        value:
          `2 busy loops at nice -5 (nice ${hogNice.join(', ')})` +
          `${limit ? ` and the services' CPU quota at ${CGROUP_PERCENT} % of the machine (cgroup)` : ''} for ${sec(fedAt - starvedAt)} s, ${leadMs / 1000} s into the load`,
      },
      ...(limit
        ? [
            {
              measure: 'the quota held the services back',
              value: `${limit.throttled.nr_throttled ?? '?'} of ${limit.throttled.nr_periods ?? '?'} periods, ${sec((limit.throttled.throttled_time ?? 0) / 1e6)} s in all`,
            },
          ]
        : []),
      { measure: 'events accepted', value: `${stored.accepted} of ${load.events.length} (${acceptedAtFed} by the end of starvation)` },
      { measure: 'ingest answers by status', value: byStatus(load.statuses) },
      { measure: 'conversations published, projected', value: `${conversationIds.length}, ${Number(conv.n)} (${convFailures} publishes failed)` },
      noneRow('lost (accepted, no activity)', stored.lost),
      noneRow('doubled (an event stored twice, or twice on a timeline)', stored.doubled),
      ...CONSUMERS.map((c) => withinRow(`${c.service} applying again after the starvation (first checkpoint)`, applyingAgain[c.service], 10_000)),
      ...consumerEnd.map((c) => ({
        measure: `${c.service} at the end: healthz, partitions assigned, lag`,
        value: `${c.health}, ${c.group.assigned} of ${c.group.partitions} (${c.group.members} members, ${c.group.state}), ${c.lag}`,
      })),
      noneRow('consumers alive but idle at the end (healthz not 200, a partition unassigned or lag > 0)', consumerEnd.filter((c) => c.idle).length),
      {
        measure: 'metrics records above the activities',
        value: `${metricsRecords - activities} (${metricsRecords} records, ${activities} activities)`,
        goal: { text: `≤ ${RELAY_ROUND.toLocaleString('en-US')} (one relay round)`, met: metricsRecords - activities <= RELAY_ROUND },
      },
      { measure: 'caught up after the load (every activity, every lag 0)', value: sec(caughtUpMs), unit: 's' },
      { measure: 'log lines of an expelled or crashed consumer', value: CONSUMERS.map((c) => `${c.service} ${crashLines[c.service]}`).join(', ') },
      { measure: 'ingest-api healthz at the end', value: ingestHealth },
    ];
    return {
      versions: { kafka: p.kafka.version, postgres: p.pg.version },
      rows,
      details: {
        rate,
        convRate,
        leadMs,
        starveMs,
        afterMs,
        cgroup: limit ? { path: limit.path, percentOfMachine: CGROUP_PERCENT, cpuStat: limit.throttled } : null,
        starvedAtS: (starvedAt - loadStart) / 1000,
        fedAtS: (fedAt - loadStart) / 1000,
        applyingAgain,
        consumerEnd,
        endLags,
        statuses: load.statuses,
        requests: load.requests,
        gaveUp: load.gaveUp,
        lostSample: stored.lostSample,
        logs: Object.fromEntries(Object.entries(p.current).map(([n, s]) => [n, s.logFile])),
        samples: samples.map((s) => ({
          t: (s.t - loadStart) / 1000,
          checkpointAgeS: Object.fromEntries(Object.entries(s.checkpoints).map(([n, c]) => [n, c > 0 ? Number(((s.t - c) / 1000).toFixed(1)) : null])),
          running: s.running,
        })),
      },
      notes: [
        `Load from the harness process: ${rate} keyed events/s in bulks of 10 (half with a contact, sent again until accepted) and ${convRate} conversation records/s on the conversations topic; one flow on placed_order. The harness runs at nice 0 too, so the load thins out while the hogs run and catches up after.`,
        `The hogs: \`nice -n -5 sh -c 'while :; do :; done'\`, one per core, killed -9 after ${starveMs / 1000} s; meanwhile the five service processes sit in a cgroup of the v1 cpu controller (cgroups v2 has no cpu controller here) with cpu.cfs_quota_us at ${CGROUP_PERCENT} % of the machine, cpu.max's equivalent (hogs alone at nice -5 left the services most of a core on this shared machine). Times count from the hogs' kill and the quota's removal.`,
        'Applying again: the first checkpoint (projection_offsets.updated_at) a consumer writes after the hogs are gone. Alive but idle: at the end, after the catch-up wait, a consumer whose /healthz is not 200, whose group leaves a partition of its topic unassigned, or whose checkpoints lag the log.',
        `metrics: records on the topic (high minus low watermarks) against the shop's activities; a relay round is ${RELAY_ROUND.toLocaleString('en-US')} rows.`,
      ],
    };
  },
};
