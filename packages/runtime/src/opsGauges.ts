import { queryRows, sql, type Db } from '@shopstream/db';
import { gauge, onScrape } from '@shopstream/telemetry';

const backlog = gauge(
  'shopstream_outbox_backlog_rows',
  'Records in the outbox not yet relayed to their topic, by topic (read from the database at each scrape).',
  ['topic'],
);
const oldest = gauge(
  'shopstream_outbox_oldest_row_seconds',
  'Age of the oldest record in the outbox, by topic: 0 when it is empty; growing while its relay is stuck (read at each scrape).',
  ['topic'],
);
const rebuildRunning = gauge(
  'shopstream_projection_rebuild_running',
  "Whether a rebuild of the projection is running now (1: its heartbeat is fresh) or not (0), from the database's rebuild records.",
  ['projection'],
);
const rebuildApplied = gauge(
  'shopstream_projection_rebuild_applied_records',
  "Records applied by the projection's latest rebuild (running or finished): its progress, from the database's rebuild records.",
  ['projection'],
);

/** A rebuild whose heartbeat is older than this is not running (rebuild.ts uses the same bound). */
const REBUILD_STALE_SECONDS = 15;

/**
 * The outbox's backlog and the rebuilds' progress, read from the database when /metrics is scraped (and only
 * then). `topics`: the outbox topics reported as 0 when they hold nothing; `projections`: likewise for rebuilds.
 * Returns the removal of the scrape hook.
 */
export function registerOpsGauges(db: Db, o: { topics: string[]; projections: string[] }): () => void {
  return onScrape(async () => {
    const rows = await queryRows(
      db,
      sql`SELECT topic, sum(records)::bigint AS n, extract(epoch FROM now() - min(created_at))::float8 AS age FROM outbox GROUP BY topic`,
      (r) => ({ topic: String(r.topic), n: Number(r.n), age: Number(r.age) }),
    );
    const rebuilds = await queryRows(
      db,
      sql`
      SELECT DISTINCT ON (projection) projection, applied,
        status = 'running' AND heartbeat_at > now() - make_interval(secs => ${REBUILD_STALE_SECONDS}) AS running
      FROM projection_rebuilds ORDER BY projection, started_at DESC`,
      (r) => ({ projection: String(r.projection), applied: Number(r.applied), running: r.running === true }),
    );
    backlog.reset();
    oldest.reset();
    for (const t of o.topics) {
      backlog.set({ topic: t }, 0);
      oldest.set({ topic: t }, 0);
    }
    for (const r of rows) {
      backlog.set({ topic: r.topic }, r.n);
      oldest.set({ topic: r.topic }, Math.max(0, r.age));
    }
    rebuildRunning.reset();
    rebuildApplied.reset();
    for (const p of o.projections) {
      rebuildRunning.set({ projection: p }, 0);
      rebuildApplied.set({ projection: p }, 0);
    }
    for (const r of rebuilds) {
      rebuildRunning.set({ projection: r.projection }, r.running ? 1 : 0);
      rebuildApplied.set({ projection: r.projection }, r.applied);
    }
  });
}
