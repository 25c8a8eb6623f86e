import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '@shopstream/db';
import { headers as H } from '@shopstream/contracts';
import type { ProjectionStatus } from '@shopstream/projections';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startActivityProjector } from '@shopstream/activity-projector';
import { startFlowMatcher } from '@shopstream/flow-matcher';
import { startConversationProjector } from '@shopstream/conversation-projector';
import { runCliCaptured } from '@shopstream/cli';
import { cliEnv, createTestShop, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';

/** `pnpm cli projections status|rebuild` as an operator runs them, against running services. */

let rt: Runtime;
let server: TestServer;
let shop: Awaited<ReturnType<typeof createTestShop>>;

// Generous for a rebuild on a busy 2-core machine: a deadline, not an expectation.
const CLI_TIMEOUT = 240_000;
/**
 * `pnpm cli projections <args>` in this process, on its own streams and exactly cliEnv's environment (a child
 * process costs seconds of start each; test/ingestCli.spec.ts and services/cli/src/exitContract.int.spec.ts
 * run it as an operator does).
 */
const cli = (...args: string[]) => runCliCaptured(['projections', ...args], cliEnv(rt));

const status = async (): Promise<ProjectionStatus[]> => {
  const r = await cli('status', '--json');
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout).projections;
};

beforeAll(async () => {
  rt = await startTestRuntime({}, 'projections-cli');
  shop = await createTestShop(rt);
  server = await startTestServer(rt, [
    await startIngestApi(rt),
    await startActivityProjector(rt),
    await startFlowMatcher(rt),
    await startConversationProjector(rt),
  ]);
  for (let i = 0; i < 3; i++) {
    const events = Array.from({ length: 100 }, (_, j) => ({ name: `Viewed ${i}-${j}`, metric: { metric_name: 'viewed', deduping_key: `${i}-${j}` } }));
    const res = await fetch(`${server.baseUrl}/v2026-04/events/bulk/`, { method: 'POST', headers: shop.headers, body: JSON.stringify({ events }) });
    expect(res.status).toBe(200);
  }
  await rt.bus.publish(rt.topics.events, [{ key: shop.shopId, value: '{"broken":', headers: { [H.shopId]: shop.shopId } }]);
  await waitFor(async () => (await rt.db.query(sql`SELECT count(*)::int AS n FROM activities`))[0].n === 300, { timeoutMs: 60_000, message: '300 activities' });
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

describe('pnpm cli projections', () => {
  it(
    'status --json gives, per projection, its group, positions against the log, lag, dead letters and rebuild',
    async () => {
      const all = await waitFor(
        async () => {
          const s = await status();
          return (
            s.find((p) => p.projection === 'activity-projector')!.lag === 0 && s.find((p) => p.projection === 'activity-projector')!.deadLetters === 1 && s
          );
        },
        { timeoutMs: 30_000, message: 'activity projector caught up, its dead letter counted' },
      );
      expect(all.map((p) => [p.projection, p.group, p.topic])).toEqual([
        ['activity-projector', `${rt.env.CONSUMER_GROUP_PREFIX}activity-projector`, rt.topics.events],
        ['flow-matcher', `${rt.env.CONSUMER_GROUP_PREFIX}flow-matcher`, rt.topics.metrics],
        ['conversation-projector', `${rt.env.CONSUMER_GROUP_PREFIX}conversation-projector`, rt.topics.conversations],
      ]);
      const activity = all[0];
      expect(activity.partitions).toHaveLength(rt.env.KAFKA_PARTITIONS);
      const used = activity.partitions.filter((p) => p.logEnd !== '0');
      expect(used).toHaveLength(1);
      expect(used[0]).toMatchObject({ applied: '301', logStart: '0', logEnd: '301', lag: 0 });
      expect(Date.parse(activity.lastAppliedAt!)).not.toBeNaN();
      expect(activity.rebuild).toBeNull();
      expect(all[2]).toMatchObject({ lag: 0, deadLetters: 0, lastAppliedAt: null });
    },
    CLI_TIMEOUT,
  );

  it(
    'rebuild refuses without --yes when nobody can answer, and an unknown projection, changing nothing',
    async () => {
      const noYes = await cli('rebuild', 'activity-projector');
      expect(noYes.code).toBe(2);
      expect(noYes.stderr).toContain('give --yes');
      const unknown = await cli('rebuild', 'activities', '--yes');
      expect(unknown.code).toBe(2);
      expect(unknown.stderr).toContain('Unknown projection "activities": one of activity-projector, flow-matcher, conversation-projector.');
      expect(await rt.db.query(sql`SELECT id FROM projection_rebuilds`)).toEqual([]);
    },
    CLI_TIMEOUT,
  );

  it(
    'rebuild --yes rebuilds with progress lines, switches, and status shows it',
    async () => {
      const before = await rt.db.query(sql`SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) AS sum FROM activities t`);
      const r = await cli('rebuild', 'activity-projector', '--yes');
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(
        /^Rebuilt activity-projector: 300 records applied in [\d.]+ s, 1 unusable records skipped \(dead-lettered before\); reads and the live projector use the new tables\.$/m,
      );
      const lines = r.stderr.trim().split('\n');
      expect(lines[0]).toMatch(/^rebuild activity-projector: [\d,]+ records applied \([\d,]+\/s\), [\d,]+ behind the live projection, ETA /);
      expect(lines.at(-1)).toMatch(/^rebuild activity-projector: 300 records applied \([\d,]+\/s\): switched$/);
      expect(await rt.db.query(sql`SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) AS sum FROM activities t`)).toEqual(before);
      const after = (await status())[0];
      expect(after.rebuild).toMatchObject({ status: 'switched', applied: 300, running: false, error: null });
      const text = await cli('status');
      expect(text.stdout).toMatch(
        /activity-projector v\d+ {2}group .*\n {2}reads .* -> activities, contact_timeline; emits .*metrics\n {2}lag 0, last applied \S+, dead letters 1, last rebuild switched at \S+ \(300 records\)/,
      );
    },
    CLI_TIMEOUT,
  );
});
