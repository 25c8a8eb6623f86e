import { createInterface } from 'node:readline/promises';
import type { Readable } from 'node:stream';
import {
  projectionStatus,
  rebuildProjection,
  RebuildRefusedError,
  type ProjectionDefinition,
  type ProjectionStatus,
  type RebuildProgress,
} from '@shopstream/projections';
import { projectionDefinitions } from '@shopstream/all-in-one';
import { recordsHeld } from '@shopstream/bus';
import type { Env } from '@shopstream/config';
import { parse, table, UsageError, type Command } from '../args.js';
import { cliIo } from '../io.js';
import { progress } from '../progress.js';
import { EmbeddedServerRunningError, withRuntime } from '../context.js';

/** The projections, as every process's /status lists them: from the services' declarations. */
const definitions = (env: Env): ProjectionDefinition<unknown>[] => projectionDefinitions(env);

/** An integer with thousands separated by commas, as toLocaleString('en-US') writes it, without loading ICU's locale data (~50-150 ms of a status). */
const num = (n: number) => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',');

function printStatus(all: ProjectionStatus[]): void {
  const blocks = all.map((s) => {
    const rebuild = !s.rebuild
      ? 'never rebuilt'
      : s.rebuild.running
        ? `REBUILD RUNNING since ${s.rebuild.startedAt} (${num(s.rebuild.applied)} records applied, id ${s.rebuild.id})`
        : `last rebuild ${s.rebuild.status}${s.rebuild.finishedAt ? ` at ${s.rebuild.finishedAt}` : ''} (${num(s.rebuild.applied)} records)${s.rebuild.error ? `: ${s.rebuild.error}` : ''}`;
    const head = [
      `${s.projection} v${s.version}  group ${s.group}`,
      `  reads ${s.topic} -> ${s.tables.join(', ')}${s.emits.length > 0 ? `; emits ${s.emits.join(', ')}` : ''}`,
      `  lag ${num(s.lag)}, last applied ${s.lastAppliedAt ?? 'never'}, dead letters ${num(s.deadLetters)}${s.deadLettersRedriven > 0 ? ` (${num(s.deadLettersRedriven)} redriven)` : ''}, ${rebuild}`,
    ];
    // Partitions that never held a record say nothing: counted, not listed (--json lists every one).
    const used = s.partitions.filter((p) => p.logEnd !== '0' || p.applied !== null);
    const rows = used.map((p) => [String(p.partition), p.applied ?? '-', p.logStart, p.logEnd, num(p.lag), p.lastAppliedAt ?? '-']);
    const grid = table(['PARTITION', 'APPLIED', 'LOG START', 'LOG END', 'LAG', 'LAST APPLIED'], rows)
      .split('\n')
      .map((l) => `  ${l}`);
    const empty = s.partitions.length - used.length;
    const note = empty > 0 ? [`  (${empty} of ${s.partitions.length} partitions never held a record)`] : [];
    return [...head, ...(used.length > 0 ? grid : []), ...note].join('\n');
  });
  console.log(blocks.join('\n\n'));
}

/** Progress on stderr, by default also off a terminal (a plain line every 5 s and at each phase): a rebuild's log. */
function progressPrinter(name: string): (p: RebuildProgress) => void {
  const bar = progress({ lines: true });
  return (p) => {
    const eta = p.etaSeconds === null ? 'unknown' : `${p.etaSeconds.toFixed(1)} s`;
    const line =
      p.phase === 'building'
        ? `rebuild ${name}: ${num(p.applied)} records applied (${num(Math.round(p.perSecond))}/s), ${num(p.behind)} behind the live projection, ETA ${eta}`
        : p.phase === 'switching'
          ? `rebuild ${name}: ${num(p.applied)} records applied, caught up: switching`
          : `rebuild ${name}: ${num(p.applied)} records applied (${num(Math.round(p.perSecond))}/s): switched`;
    if (p.phase === 'switched') bar.done(line);
    else bar.update(() => line, p.phase !== 'building');
  };
}

/** The run's stdin when it is a terminal (a run in process without one, as tests make, is never asked). */
function terminal(): (Readable & { isTTY?: boolean }) | undefined {
  const stdin = cliIo().stdin as (Readable & { isTTY?: boolean }) | undefined;
  return stdin?.isTTY ? stdin : undefined;
}

async function confirm(question: string): Promise<boolean> {
  const input = terminal();
  if (!input) return false;
  const rl = createInterface({ input, output: cliIo().stderr });
  try {
    return /^y(es)?$/i.test((await rl.question(`${question} [y/N] `)).trim());
  } finally {
    rl.close();
  }
}

export const command: Command = {
  refused: (e) => e instanceof RebuildRefusedError || e instanceof EmbeddedServerRunningError,
  subcommands: {
    status: {
      usage: `  pnpm cli projections status [--json]
      For each projection: its consumer group, per partition the position applied in Postgres against the
      log's first and last offset, the lag, when it last applied a record, its dead letters, and its rebuild.`,
      async run(args) {
        const { values } = parse(args, { json: { type: 'boolean' } });
        // A read: no retention check of the topics on the way (`pnpm cli topics ensure` reports and fixes it).
        await withRuntime(
          async (rt) => {
            const all = await projectionStatus(definitions(rt.env), { bus: rt.bus, db: rt.db, topics: rt.topics, groupPrefix: rt.env.CONSUMER_GROUP_PREFIX });
            if (values.json) console.log(JSON.stringify({ projections: all }, null, 2));
            else printStatus(all);
          },
          { checkRetention: false },
        );
        return 0;
      },
    },
    rebuild: {
      usage: `  pnpm cli projections rebuild <projection> [--yes] [--keep-old] [--give-up-after <seconds>]
      Rebuilds one projection (activity-projector, flow-matcher, conversation-projector) from the first
      record of its topic into a new generation of its tables while the running services keep serving the
      current one, then switches reads and the live projector to the new generation in one transaction and
      drops the old one (--keep-old keeps it, in a schema named in the output). Emits no metric event or flow
      trigger again, except those the live run never emitted (records it dead-lettered that the rebuild could
      apply). First drops what rebuilds that died left behind. Asks for confirmation unless --yes. Progress
      goes to stderr. Exit 2, with nothing changed, when a partition's log no longer starts at offset 0, when
      another rebuild of the projection runs, or in embedded mode on PGlite while \`pnpm start\` holds the data
      directory. Exit 1, having cleaned up, when its consumer delivers nothing while records remain, or the
      database does not answer, for --give-up-after seconds (default 30).`,
      async run(args) {
        const { values, positionals } = parse(
          args,
          { yes: { type: 'boolean' }, 'keep-old': { type: 'boolean' }, 'give-up-after': { type: 'string', default: '30' } },
          true,
        );
        if (positionals.length !== 1) throw new UsageError('Name one projection to rebuild.');
        const giveUpAfter = Number(values['give-up-after']);
        if (!(giveUpAfter > 0)) throw new UsageError('--give-up-after takes a number of seconds above 0.');
        return await withRuntime(async (rt) => {
          const defs = definitions(rt.env);
          const def = defs.find((d) => d.name === positionals[0]);
          if (!def) throw new UsageError(`Unknown projection "${positionals[0]}": one of ${defs.map((d) => d.name).join(', ')}.`);
          const topic = def.source(rt.topics);
          if (!values.yes) {
            const records = recordsHeld(await rt.bus.offsets(topic));
            const ok = await confirm(
              `Rebuild ${def.name} from the ${num(records)} records of ${topic} into new ${def.tables.join(', ')} tables, then switch to them?`,
            );
            if (!ok) {
              console.error(terminal() ? 'Not rebuilt.' : 'Not rebuilt: give --yes to rebuild without a question.');
              return 2;
            }
          }
          const result = await rebuildProjection(def, {
            bus: rt.bus,
            db: rt.db,
            logger: rt.logger,
            topics: rt.topics,
            groupPrefix: rt.env.CONSUMER_GROUP_PREFIX,
            env: rt.env,
            keepOld: values['keep-old'] === true,
            deadAfterMs: giveUpAfter * 1000,
            onProgress: progressPrinter(def.name),
          });
          console.log(
            `Rebuilt ${def.name}: ${num(result.applied)} records applied in ${result.seconds.toFixed(1)} s` +
              `${result.rejected > 0 ? `, ${num(result.rejected)} unusable records skipped (dead-lettered before)` : ''}; reads and the live projector use the new tables.` +
              (result.emitted > 0 ? `\n${num(result.emitted)} records the live run never emitted (it dead-lettered their source) were emitted now.` : '') +
              (result.keptSchema ? `\nThe old tables are kept in schema ${result.keptSchema} (DROP SCHEMA ${result.keptSchema} CASCADE when done).` : ''),
          );
          return 0;
        });
      },
    },
  },
};
