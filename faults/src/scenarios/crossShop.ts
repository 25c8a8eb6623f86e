import { isDeepStrictEqual } from 'node:util';
import { Kafka, logLevel } from 'kafkajs';
import { caller, crossShopAttempts, ownEventWithForeignContact, revealsOrChanges, seedShop, snapshot } from '@shopstream/testkit/crossShop';
import { startAllInOne } from '../allInOne.js';
import type { Context, Figures, Scenario } from '../types.js';

/**
 * Cross-shop: every read and write operation of the served OpenAPI document tried by other shops on shop A's
 * data: with their key and A's shop id, and with their own key and A's ids and cursors. The seeding, the
 * attempts and the judgement of test/crossShop.spec.ts (@shopstream/testkit/crossShop); the all-in-one service
 * in its own process, on its own broker and PostgreSQL. A's reads are compared before and after.
 */
export const crossShop: Scenario = {
  name: 'cross-shop',
  description: "every operation with another shop's key, ids and cursors: nothing of the other shop revealed or changed",
  async run(ctx: Context): Promise<Figures> {
    const others = ctx.opts.quick ? 1 : 3;
    const stack = await startAllInOne(ctx, { shops: 1 + others, env: { FLOW_REFRESH_MS: '300', EXPORT_RATE_LIMIT_PER_MINUTE: '1000000' } });
    const base = stack.service.baseUrl;
    const [a, ...bs] = stack.shops;
    const call = caller(base);
    const doc = (await (await fetch(`${base}/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> };
    const operations = Object.values(doc.paths).reduce((n, ops) => n + Object.keys(ops).filter((m) => m !== 'parameters').length, 0);

    const kafka = new Kafka({ clientId: 'faults-cross-shop', brokers: stack.kafka.brokers, logLevel: logLevel.NOTHING });
    const producer = kafka.producer();
    await producer.connect();
    ctx.defer(() => producer.disconnect());
    const A = await seedShop(call, a, doc, {
      metricsUrl: `${base}/metrics`,
      publish: async (records) => void (await producer.send({ topic: 'conversations', messages: records })),
    });
    ctx.log(`shop A seeded: ${A.ids.size} ids, cursors of ${Object.keys(A.cursors).length} lists`);
    const before = await snapshot(call, a, A);

    const statuses: Record<string, number> = {};
    const byKind: Record<string, { tried: number; statuses: Record<string, number> }> = {};
    const leaks: string[] = [];
    const unexpected: string[] = [];
    const opsTried = new Set<string>();
    let tried = 0;
    for (const b of bs) {
      const own = await ownEventWithForeignContact(call, b, A);
      tried++;
      statuses[String(own.reply.status)] = (statuses[String(own.reply.status)] ?? 0) + 1;
      if (own.problem) (own.reply.status === 202 ? leaks : unexpected).push(own.problem);
      for (const t of crossShopAttempts(doc, A, b, own.contact ?? '00000000-0000-4000-8000-000000000000', a.shopId, { everyId: true })) {
        const r = await call(b, t.method, t.path, t.body, t.headers);
        tried++;
        opsTried.add(t.op);
        statuses[String(r.status)] = (statuses[String(r.status)] ?? 0) + 1;
        const k = (byKind[t.kind] ??= { tried: 0, statuses: {} });
        k.tried++;
        k.statuses[String(r.status)] = (k.statuses[String(r.status)] ?? 0) + 1;
        const leak = revealsOrChanges(t, r, A);
        if (leak) leaks.push(leak);
        const code = r.body?.error?.code as string | undefined;
        if (r.status !== t.expected.status || (t.expected.code !== undefined && code !== t.expected.code))
          unexpected.push(`${t.kind} ${t.method} ${t.path}: ${r.status} ${code ?? ''} (expected ${t.expected.status} ${t.expected.code ?? ''})`);
      }
    }
    // Control: the reads of the foreign-key attempts (A's ids, A's shop), by A itself, do reveal A's data (so the check above can fail).
    const reads = crossShopAttempts(doc, A, bs[0], A.contact, a.shopId).filter((t) => t.method === 'GET' && t.kind === 'foreign-key');
    let controlRevealed = 0;
    for (const t of reads) {
      const r = await call(a, 'GET', t.path);
      if (revealsOrChanges({ ...t, kind: 'foreign-id' }, r, A)) controlRevealed++;
    }
    const after = await snapshot(call, a, A);
    const changed = Object.keys(before).filter((k) => !isDeepStrictEqual(before[k as keyof typeof before], after[k as keyof typeof after]));
    ctx.log(`${tried} attempts; ${leaks.length} leaks, ${unexpected.length} unexpected answers, A's reads changed: ${changed.join(', ') || 'none'}`);
    const statusText = (m: Record<string, number>) =>
      Object.entries(m)
        .sort(([x], [y]) => x.localeCompare(y))
        .map(([s, n]) => `${s}: ${n}`)
        .join(', ');
    return {
      versions: stack.versions,
      rows: [
        { measure: 'operations in /openapi.json', value: operations },
        { measure: 'operations tried', value: `${opsTried.size} of ${operations}`, goal: { text: 'all', met: opsTried.size === operations } },
        { measure: 'other shops', value: others },
        { measure: 'attempts', value: tried },
        ...Object.entries(byKind).map(([kind, k]) => ({ measure: `  ${describeKind(kind)}`, value: `${k.tried} (${statusText(k.statuses)})` })),
        { measure: 'answers by status', value: statusText(statuses) },
        { measure: "answers revealing or changing A's data", value: leaks.length, goal: { text: '0', met: leaks.length === 0 } },
        { measure: "A's reads changed (before vs after)", value: changed.length, goal: { text: '0', met: changed.length === 0 } },
        {
          measure: 'control: the same reads by A itself judged revealing',
          value: `${controlRevealed} of ${reads.length}`,
          goal: { text: 'all', met: controlRevealed === reads.length },
        },
        {
          measure: 'answers other than expected (403 / 404 / 400 invalid_cursor / 200)',
          value: unexpected.length,
          goal: { text: '0', met: unexpected.length === 0 },
        },
      ],
      details: {
        operations,
        others,
        tried,
        control: { reads: reads.length, revealed: controlRevealed },
        statuses,
        byKind,
        leaks,
        unexpected,
        changed,
        cursors: Object.keys(A.cursors),
        aIds: A.ids.size,
        log: stack.service.logFile,
      },
      notes: [
        `Shop A: a flow with two triggers, two events with a contact and two without, two conversations, a second flow (${A.ids.size} ids); a second-page cursor of each of its ${Object.keys(A.cursors).length} lists. ${others} other shop${others > 1 ? 's' : ''}, each trying every operation with its key and A's shop id, every operation that takes an id with each of A's ids, every list with A's cursors, its own lists, and an event naming A's contact id as its own.`,
        "A leak is a 2xx to a foreign key, id or cursor, or any answer naming one of A's ids the caller did not send; A's reads (an activity, a timeline, the workspace, the flows, a flow, its triggers, the export) are compared before and after.",
      ],
    };
  },
};

function describeKind(kind: string): string {
  return (
    {
      'foreign-key': "another shop's key, A's shop id",
      'foreign-id': "own key, A's ids in the path",
      'foreign-cursor': "own key, A's cursors",
      own: 'own key, own lists (nothing of A)',
    }[kind] ?? kind
  );
}
