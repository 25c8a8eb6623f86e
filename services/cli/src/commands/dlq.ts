import { ownedTopics } from '@shopstream/bus';
import { listDeadLetters, redriveDeadLetters, type DeadLetter, type RedriveReport } from '@shopstream/projections';
import type { Runtime } from '@shopstream/runtime';
import { parse, table, UsageError, type Command } from '../args.js';
import { EmbeddedServerRunningError, withRuntime } from '../context.js';

const note = `The topic may be given with or without TOPIC_PREFIX. In embedded mode it runs while \`pnpm start\` serves; on PGlite
(EMBEDDED_DB=pglite), while it is stopped.`;

/** The owned dead-letter topic the operator named, with or without the deployment's prefix. */
function deadLetterTopic(rt: Runtime, name: string | undefined): string {
  const known = ownedTopics(rt.topics)
    .filter((t) => t.role === 'dead-letter')
    .map((t) => t.topic);
  if (!name) throw new UsageError(`Name a dead-letter topic: one of ${known.join(', ')}.`);
  const found = known.find((t) => t === name || t === `${rt.env.TOPIC_PREFIX}${name}`);
  if (!found) throw new UsageError(`Unknown dead-letter topic "${name}": one of ${known.join(', ')}.`);
  return found;
}

/** One line, at most n characters. */
const short = (s: string, n: number): string => {
  const line = s.replace(/\s+/g, ' ');
  return line.length > n ? `${line.slice(0, n - 1)}…` : line;
};

function printList(topic: string, all: DeadLetter[], filtered: boolean): void {
  if (all.length === 0) {
    console.log(`${topic} holds no dead letters${filtered ? ' whose reason matches' : ''}.`);
    return;
  }
  const redriven = all.filter((d) => d.redriven?.state === 'sent').length;
  const failedAgain = all.filter((d) => d.failedAgain > 0 && d.redriven === null).length;
  const rows = all.map((d) => [
    `${d.partition}/${d.offset}`,
    d.sourceTopic ? `${d.sourceTopic}/${d.sourcePartition ?? '?'}/${d.sourceOffset ?? '?'}` : '-',
    d.key ?? '-',
    d.deadLetteredAt,
    d.redriven ? (d.redriven.state === 'sent' ? d.redriven.at : `claimed ${d.redriven.at}, not confirmed`) : 'no',
    `${d.redrives}/${d.failedAgain}`,
    short(d.reason ?? '-', 160),
  ]);
  const again = failedAgain > 0 ? `, ${failedAgain} refused again after a redrive (sent again only with --again)` : '';
  console.log(`${topic}: ${all.length} dead letter${all.length === 1 ? '' : 's'}${filtered ? ' whose reason matches' : ''}, ${redriven} redriven${again}`);
  console.log(table(['DLQ PARTITION/OFFSET', 'SOURCE TOPIC/PARTITION/OFFSET', 'KEY', 'DEAD-LETTERED AT', 'REDRIVEN', 'REDRIVES/FAILED', 'REASON'], rows));
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

function reportLine(r: RedriveReport): string {
  const details = [
    `${r.alreadyRedriven} already redriven`,
    `${r.notMatching} not matching`,
    ...(r.inFlight > 0 ? [`${r.inFlight} claimed by another redrive running now`] : []),
    ...(r.failedAgain > 0 ? [`${r.failedAgain} refused again after a redrive, sent only with --again`] : []),
    ...(r.unredrivable > 0 ? [`${r.unredrivable} without a source header naming ${r.to}, never sent`] : []),
  ];
  const resent =
    r.resent > 0
      ? `\n${plural(r.resent, 'of them was', 'of them were')} claimed by a redrive that stopped before confirming: ${r.dryRun ? 'they would be' : 'sent'} again (a projection applies a record id once).`
      : '';
  return `${r.dryRun ? 'Would redrive' : 'Redrove'} ${r.redriven} of ${plural(r.total, 'dead letter')} in ${r.topic} (${details.join(', ')}) back to ${r.to}.${resent}`;
}

export const command: Command = {
  note,
  refused: (e) => e instanceof EmbeddedServerRunningError,
  subcommands: {
    list: {
      usage: `  pnpm cli dlq list <topic> [--reason-contains <text>] [--json]
      Every dead letter of a dead-letter topic (events.dlq, metrics.dlq, conversations.dlq, ...), once each: where
      it came from (source topic, partition, offset of the record that first failed), its key, why its latest
      copy was refused, when, whether that copy was redriven, and how many times it was redriven and refused
      again (REDRIVES/FAILED). --json prints one document with each record's headers and value as well.`,
      async run(args) {
        const { values, positionals } = parse(args, { json: { type: 'boolean' }, 'reason-contains': { type: 'string' } }, true);
        if (positionals.length > 1) throw new UsageError('Name one dead-letter topic.');
        await withRuntime(async (rt) => {
          const topic = deadLetterTopic(rt, positionals[0]);
          const all = await listDeadLetters(rt.bus, rt.db, topic, { reasonContains: values['reason-contains'] });
          if (values.json) {
            const deadLetters = all.map(({ value, ...d }) => ({ ...d, value: value.toString('utf8') }));
            console.log(JSON.stringify({ topic, deadLetters }, null, 2));
          } else printList(topic, all, values['reason-contains'] !== undefined);
        });
        return 0;
      },
    },
    redrive: {
      usage: `  pnpm cli dlq redrive <topic> [--reason-contains <text>] [--again] [--dry-run] [--json]
      Sends the dead letters back to their source topic, once the cause is fixed: same key, same value, their
      original headers (plus redriven_from). Records what it sent, so a second run sends nothing twice; a dead
      letter that was redriven and refused again is not sent unless --again says its cause is gone now (then
      its latest copy goes, once). --reason-contains sends only those whose reason contains the text
      (case-insensitive); --dry-run counts what it would send and sends nothing. A redriven record is applied
      after the records that followed it.`,
      async run(args) {
        const { values, positionals } = parse(
          args,
          { json: { type: 'boolean' }, 'dry-run': { type: 'boolean' }, again: { type: 'boolean' }, 'reason-contains': { type: 'string' } },
          true,
        );
        if (positionals.length > 1) throw new UsageError('Name one dead-letter topic.');
        await withRuntime(async (rt) => {
          const topic = deadLetterTopic(rt, positionals[0]);
          const report = await redriveDeadLetters(topic, {
            bus: rt.bus,
            db: rt.db,
            logger: rt.logger,
            reasonContains: values['reason-contains'],
            dryRun: values['dry-run'] === true,
            again: values.again === true,
          });
          console.log(values.json ? JSON.stringify(report, null, 2) : reportLine(report));
        });
        return 0;
      },
    },
  },
};
