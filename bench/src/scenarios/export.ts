import { randomBytes } from 'node:crypto';
import { v5 as uuidv5 } from 'uuid';
import { queryRows, sql, type Db, type SQLQuery } from '@shopstream/db';
import type { Bench } from '../context.js';
import type { Row, ScenarioResult } from '../report.js';
import { round } from '../stats.js';

/** The seeded shop: fixed, so a database kept with --keep is found again by the next run. */
const EXPORT_SHOP = uuidv5('shopstream-bench-export-shop', '6f1c2a8e-6a0e-4d8b-9a57-2a1d5f1e9b10');
const SPAN_DAYS = 365;
const DAY_MS = 86_400_000;
const WINDOW_DAYS = 30;
const CHUNK = 100_000;
const COLD_PROBES = 30;
const WARM_REQUESTS = 100;

const TYPES = ['phone_call', 'web_call', 'web_call_demo', 'video_call', 'web_chat', 'email', 'sms', 'comments', 'form'];
const PHRASES = [
  'Hi, I ordered a linen shirt last week and it has not arrived yet.',
  'Can you tell me where my parcel is? The tracking page shows nothing.',
  'Thanks for your patience, I have checked with the warehouse.',
  'Your order left our warehouse yesterday and should arrive on Friday.',
  'Great, that solved it. Have a nice day!',
  'Could I change the size to M before it ships?',
  'I am sorry for the delay; I have refunded the shipping costs.',
];

/** Message k (1-based) of conversation i: the same text whether written as a message or as last_message_content. */
const messageText = (i: SQLQuery, k: SQLQuery) =>
  sql`(${PHRASES}::text[])[1 + ((${i} + ${k}) % ${PHRASES.length})] || ' (#' || ${k} || ' of conversation ' || ${i} || ')'`;

/**
 * The export read model seeded straight into its tables: `n` conversations over the last 365 days, each
 * with 5 to 15 messages (10 on average), consistent with what the conversation projector would store.
 * Indexes are dropped during the load and rebuilt after it, which is many times faster than maintaining them.
 */
async function seed(db: Db, n: number, log: (s: string) => void): Promise<void> {
  await db.query(sql`TRUNCATE conversations, conversation_messages`);
  const tables = ['conversations', 'conversation_messages'];
  const indexes = await queryRows(
    db,
    sql`
    SELECT i.indexrelid::regclass::text AS name, t.relname AS table_name, pg_get_indexdef(i.indexrelid) AS def,
      c.conname AS constraint_name, pg_get_constraintdef(c.oid) AS constraint_def
    FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
    LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid
    WHERE t.relname = ANY(${tables}) AND t.relnamespace = 'public'::regnamespace`,
    (r) => {
      const ix = { name: String(r.name), table_name: String(r.table_name), def: String(r.def) };
      return r.constraint_name === null
        ? { ...ix, constraint_name: null }
        : { ...ix, constraint_name: String(r.constraint_name), constraint_def: String(r.constraint_def) };
    },
  );
  for (const ix of indexes) {
    if (ix.constraint_name) await db.query(sql`ALTER TABLE ${sql.ident(ix.table_name)} DROP CONSTRAINT ${sql.ident(ix.constraint_name)}`);
    else await db.query(sql`DROP INDEX ${sql.ident(ix.name)}`);
  }
  const end = Date.now();
  const start = end - SPAN_DAYS * DAY_MS;
  const stepUs = Math.floor((SPAN_DAYS * DAY_MS * 1000) / n);
  const started = performance.now();
  for (let from = 1; from <= n; from += CHUNK) {
    const to = Math.min(n, from + CHUNK - 1);
    const s = sql`(SELECT i, to_timestamp(${start / 1000}) + (i * ${stepUs}::bigint + (hashint4(i)::bigint & 1048575)) * interval '1 microsecond' AS t,
        5 + (hashint4(i + 7)::bigint & 2147483647) % 11 AS nm FROM generate_series(${from}::int, ${to}::int) AS i)`;
    await db.tx(async (tx) => {
      await tx.query(sql`SET LOCAL synchronous_commit = off`);
      await tx.query(sql`
        INSERT INTO conversations (shop_id, id, agent_id, contact_id, user_id, created_at, updated_at, escalation_time, start_time, resolved_at,
          last_message_at, last_message_content, last_message_id, summary, title, flags, tags, intent, topic, resolution, status, type)
        SELECT ${EXPORT_SHOP}::uuid, overlay(overlay(md5('c' || i) placing '4' from 13) placing '8' from 17)::uuid,
          CASE WHEN i % 4 <> 0 THEN overlay(overlay(md5('agent' || (i % 50)) placing '4' from 13) placing '8' from 17)::uuid END,
          CASE WHEN i % 3 <> 0 THEN overlay(overlay(md5('contact' || (i % 200000)) placing '4' from 13) placing '8' from 17)::uuid END,
          CASE WHEN i % 2 = 0 THEN overlay(overlay(md5('user' || (i % 1000)) placing '4' from 13) placing '8' from 17)::uuid END,
          t, t + (nm * 47 + 60) * interval '1 second',
          CASE WHEN i % 10 = 0 THEN t + interval '5 minutes' END,
          t,
          CASE WHEN i % 3 = 0 THEN t + (nm * 47 + 30) * interval '1 second' END,
          t + (nm - 1) * 47 * interval '1 second', ${messageText(sql`i`, sql`nm`)}, overlay(overlay(md5('m' || i || ':' || nm) placing '4' from 13) placing '8' from 17)::uuid,
          'The customer asked about order #' || (10000 + i % 90000) || ' and its delivery date; the agent confirmed shipping.',
          'Where is my order #' || (10000 + i % 90000) || '?',
          CASE WHEN i % 7 = 0 THEN jsonb_build_array(jsonb_build_object('id', overlay(overlay(md5('flag' || (i % 5)) placing '4' from 13) placing '8' from 17)::uuid, 'name', 'needs follow-up')) ELSE '[]'::jsonb END,
          jsonb_build_array('order-status', 'tier-' || (i % 4)),
          CASE WHEN i % 5 <> 0 THEN jsonb_build_object('id', overlay(overlay(md5('intent' || (i % 12)) placing '4' from 13) placing '8' from 17)::uuid, 'name', 'intent ' || (i % 12)) ELSE '{}'::jsonb END,
          CASE WHEN i % 2 = 0 THEN jsonb_build_object('id', overlay(overlay(md5('topic' || (i % 30)) placing '4' from 13) placing '8' from 17)::uuid, 'name', 'topic ' || (i % 30)) ELSE '{}'::jsonb END,
          (ARRAY['hard','soft','escalated','human','merged'])[1 + i % 5],
          (ARRAY['new','open','pending'])[1 + i % 3],
          (${TYPES}::text[])[1 + i % ${TYPES.length}]
        FROM ${s} AS s`);
      await tx.query(sql`
        INSERT INTO conversation_messages (shop_id, id, conversation_id, created_at, text)
        SELECT ${EXPORT_SHOP}::uuid, overlay(overlay(md5('m' || i || ':' || k) placing '4' from 13) placing '8' from 17)::uuid, overlay(overlay(md5('c' || i) placing '4' from 13) placing '8' from 17)::uuid, t + (k - 1) * 47 * interval '1 second', ${messageText(sql`i`, sql`k`)}
        FROM ${s} AS s CROSS JOIN LATERAL generate_series(1, nm::int) AS k`);
    });
    log(`seeded ${to.toLocaleString('en-US')} / ${n.toLocaleString('en-US')} conversations (${((performance.now() - started) / 1000).toFixed(0)} s)`);
  }
  for (const ix of indexes) {
    await db.tx(async (tx) => {
      await tx.query(sql`SET LOCAL maintenance_work_mem = '512MB'`);
      if (ix.constraint_name)
        await tx.query(
          sql`ALTER TABLE ${sql.ident(ix.table_name)} ADD CONSTRAINT ${sql.ident(ix.constraint_name)} ${sql.__dangerous__rawValue(ix.constraint_def)}`,
        );
      else await tx.query(sql.__dangerous__rawValue(ix.def));
    });
  }
  log(`rebuilt ${indexes.length} indexes (${((performance.now() - started) / 1000).toFixed(0)} s)`);
  await db.query(sql`VACUUM ANALYZE conversations`);
  await db.query(sql`VACUUM ANALYZE conversation_messages`);
  log(`seeded and analysed in ${((performance.now() - started) / 1000).toFixed(0)} s`);
}

const iso = (ms: number) => new Date(ms).toISOString();
const pathOf = (startMs: number) =>
  `/v2026-04/conversations/export/?created_at__range=${encodeURIComponent(`${iso(startMs)},${iso(startMs + WINDOW_DAYS * DAY_MS)}`)}&limit=100`;

/**
 * Export pages from a read model of `--conversations` conversations (10 messages each on average):
 * first pages of random 30-day windows right after a fresh query-api start (cold), the same again once
 * warm, and a full walk of one 30-day window following `next`.
 */
export async function exportScenario(b: Bench): Promise<ScenarioResult> {
  const n = b.opts.conversations;
  const have = Number((await b.db.query(sql`SELECT count(*)::int AS n FROM conversations WHERE shop_id = ${EXPORT_SHOP}`))[0].n);
  const seededAt = performance.now();
  let seededNow = false;
  if (have !== n) {
    await seed(b.db, n, (s) => console.log(`  ${s}`));
    seededNow = true;
  }
  const seedSeconds = (performance.now() - seededAt) / 1000;
  const [span] = await b.db.query(sql`SELECT min(created_at) AS lo, max(created_at) AS hi FROM conversations WHERE shop_id = ${EXPORT_SHOP}`);
  const [sizes] = await b.db.query(sql`SELECT (SELECT count(*) FROM conversation_messages)::bigint AS messages,
    pg_size_pretty(pg_total_relation_size('conversations')) AS conversations_size, pg_size_pretty(pg_total_relation_size('conversation_messages')) AS messages_size`);
  const lo = (span.lo as Date).getTime();
  const hi = (span.hi as Date).getTime();
  const randomStart = () => lo + Math.random() * Math.max(0, hi - lo - WINDOW_DAYS * DAY_MS);

  const key = `bench_${randomBytes(24).toString('base64url')}`;
  const shop = { shopId: EXPORT_SHOP, key };
  const { child, baseUrl } = await b.server(['query-api'], { BOOTSTRAP_API_KEYS: `${key}=${EXPORT_SHOP}` });
  const windows = Array.from({ length: COLD_PROBES }, randomStart);
  const get = (paths: string[], walk = false, maxMs?: number) =>
    b.load({ mode: 'get', baseUrl, shop, paths, walk, durationMs: 600_000, warmupMs: 0, maxMs }, { server: child });

  const cold = await get(windows.map(pathOf));
  const warmPaths = Array.from({ length: WARM_REQUESTS }, (_, i) => pathOf(windows[i % windows.length]));
  const warm = await get(warmPaths);
  const walkStart = lo + (hi - lo) / 2 - (WINDOW_DAYS * DAY_MS) / 2;
  // A walk is bounded in time so a slow export cannot hold the whole bench; the table says when it was cut.
  const walkCapMs = Math.max(90_000, b.opts.durationMs * 6);
  const walk = await get([pathOf(walkStart)], true, walkCapMs);
  await b.stopChild(child);

  for (const r of [cold, warm, walk]) if (r.result.firstError) throw new Error(`export request failed: ${r.result.firstError}`);
  const windowCount = Number(
    (
      await b.db.query(sql`SELECT count(*)::int AS n FROM conversations WHERE shop_id = ${EXPORT_SHOP}
        AND created_at >= ${iso(walkStart)}::timestamptz AND created_at < ${iso(walkStart + WINDOW_DAYS * DAY_MS)}::timestamptz`)
    )[0].n,
  );
  const explain = await explainPage(b.db, walkStart);
  const w = walk.result;
  const execMs = (lines: string[]) => Number(/Execution Time: ([0-9.]+) ms/.exec(lines.join('\n'))?.[1] ?? NaN);
  const rows: Row[] = [
    {
      measure: 'page SQL, ORDER BY the to_char alias (before 5c1aa73), EXPLAIN ANALYZE',
      value: execMs(explain.page),
      unit: 'ms',
      baseline: { name: 'ORDER BY the table columns, as exportPage.ts now does', value: execMs(explain.pageOrderedByColumns) },
    },
    { measure: 'page of 100, cold p50', value: cold.result.latencyMs.p50, unit: 'ms' },
    { measure: 'page of 100, cold p99', value: cold.result.latencyMs.p99, unit: 'ms' },
    { measure: 'page of 100, warm p50', value: warm.result.latencyMs.p50, unit: 'ms', budget: { text: '< 25 ms', met: warm.result.latencyMs.p50 < 25 } },
    { measure: 'page of 100, warm p99', value: warm.result.latencyMs.p99, unit: 'ms' },
    { measure: '30-day walk, page p50', value: w.latencyMs.p50, unit: 'ms', budget: { text: '< 25 ms', met: w.latencyMs.p50 < 25 } },
    { measure: '30-day walk, page p99', value: w.latencyMs.p99, unit: 'ms' },
    w.complete
      ? { measure: '30-day walk, total', value: round((w.totalMs ?? 0) / 1000), unit: `s (${w.pages} pages, ${w.conversations} conversations)` }
      : {
          measure: '30-day walk, projected total',
          value: round(((w.totalMs ?? 0) / 1000) * (windowCount / Math.max(1, w.conversations ?? 1))),
          unit: `s (cut after ${w.pages} pages in ${round((w.totalMs ?? 0) / 1000)} s; ${windowCount} conversations in the window)`,
        },
  ];
  return {
    scenario: 'export',
    rows,
    details: {
      conversations: n,
      messages: Number(sizes.messages),
      sizes: { conversations: sizes.conversations_size, messages: sizes.messages_size },
      seededNow,
      seedSeconds,
      cold,
      warm,
      walk,
      explainFirstPage: explain.page,
      explainFirstPageOrderedByColumns: explain.pageOrderedByColumns,
      explainMessages: explain.messages,
      walkWindowConversations: windowCount,
      walkCapMs,
    },
    notes: [
      `${n.toLocaleString('en-US')} conversations with ${Number(sizes.messages).toLocaleString('en-US')} messages (tables ${sizes.conversations_size} and ${sizes.messages_size}) over ${SPAN_DAYS} days in one shop; ${seededNow ? `seeded in ${seedSeconds.toFixed(0)} s` : 'reused from an earlier --keep run'}.`,
      `Cold: the first ${COLD_PROBES} requests of a freshly started query-api, each the first page of a different random 30-day window (Postgres' shared buffers do not hold those pages; the OS page cache may). Warm: ${WARM_REQUESTS} more requests over the same windows.`,
      'One request at a time from a separate process; the export rate limit is raised so that it never answers 429 (its counter update still runs on every request).',
    ],
  };
}

/**
 * EXPLAIN (ANALYZE, BUFFERS) of an export page's statements: the page as exportPage.ts wrote it before
 * 5c1aa73 (the select list's `to_char(created_at ...) AS created_at` shadows the column, so `ORDER BY
 * created_at, id` sorted by the text and no index could serve it), the page as it is now (ORDER BY the
 * table's columns), and the messages of the page.
 */
async function explainPage(db: Db, startMs: number): Promise<{ page: string[]; pageOrderedByColumns: string[]; messages: string[] }> {
  const ts = (c: string) => sql`to_char(${sql.ident(c)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
  const page = sql`
    SELECT id, agent_id, contact_id, user_id, ${ts('created_at')} AS created_at, ${ts('updated_at')} AS updated_at,
      ${ts('escalation_time')} AS escalation_time, ${ts('start_time')} AS start_time, ${ts('last_message_at')} AS last_message_at,
      ${ts('resolved_at')} AS resolved_at, last_message_content, summary, title, flags, tags, intent, topic, resolution, status, type
    FROM conversations WHERE shop_id = ${EXPORT_SHOP} AND created_at >= ${iso(startMs)}::timestamptz AND created_at < ${iso(startMs + WINDOW_DAYS * DAY_MS)}::timestamptz
    ORDER BY created_at, id LIMIT 101`;
  const pageByColumns = sql`
    SELECT id, agent_id, contact_id, user_id, ${ts('created_at')} AS created_at, ${ts('updated_at')} AS updated_at,
      ${ts('escalation_time')} AS escalation_time, ${ts('start_time')} AS start_time, ${ts('last_message_at')} AS last_message_at,
      ${ts('resolved_at')} AS resolved_at, last_message_content, summary, title, flags, tags, intent, topic, resolution, status, type
    FROM conversations WHERE shop_id = ${EXPORT_SHOP} AND created_at >= ${iso(startMs)}::timestamptz AND created_at < ${iso(startMs + WINDOW_DAYS * DAY_MS)}::timestamptz
    ORDER BY conversations.created_at, conversations.id LIMIT 101`;
  const plan = (q: SQLQuery) => db.query(sql`EXPLAIN (ANALYZE, BUFFERS) ${q}`).then((rs) => rs.map((r) => r['QUERY PLAN'] as string));
  const ids = (await db.query(pageByColumns)).slice(0, 100).map((r) => r.id as string);
  const messages = sql`
    SELECT conversation_id, id, ${ts('created_at')} AS created_at, text FROM conversation_messages
    WHERE shop_id = ${EXPORT_SHOP} AND conversation_id = ANY(${`{${ids.join(',')}}`}::uuid[])
    ORDER BY conversation_messages.conversation_id, conversation_messages.created_at, conversation_messages.id`;
  return { page: await plan(page), pageOrderedByColumns: await plan(pageByColumns), messages: await plan(messages) };
}
