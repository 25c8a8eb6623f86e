import { beforeAll, afterAll } from 'vitest';
import { queryRow, connectPostgres, migrate, sql, type Db } from '@shopstream/db';
import { createLogger } from '@shopstream/telemetry';
import { uniquePrefix } from '@shopstream/testkit';
import { busConformance } from './busConformance.js';
import { appendRecords, createPgLogBus } from '@shopstream/bus';

/**
 * The conformance suite for the Postgres log on a PostgreSQL server: `open` gives the URL of a migrated-to-be
 * database (a test database on the shared server, or the embedded mode's own PostgreSQL), `close` ends it.
 */
export function pgLogOnServerConformance(name: string, open: () => Promise<string>, close: () => Promise<void> = async () => {}) {
  const logger = createLogger('bus-conformance', process.env.TEST_LOG_LEVEL ?? 'silent');
  const prefix = uniquePrefix();
  let url: string;
  let db: Db;
  const extra: Db[] = [];

  beforeAll(async () => {
    url = await open();
    db = connectPostgres({ url, poolSize: 5 });
    await migrate(db);
  });
  afterAll(async () => {
    await Promise.all(extra.map((d) => d.close()));
    await db?.close();
    await close();
  });

  busConformance({
    name,
    kind: 'pglog',
    features: { consumerGroupsSharePartitions: false, transactionalAppends: true },
    newBus: () => createPgLogBus({ db, logger, pollIntervalMs: 500 }),
    async unreachableBus() {
      const nowhere = connectPostgres({ url: 'postgres://shopstream@127.0.0.1:1/nowhere', poolSize: 1 });
      extra.push(nowhere);
      return createPgLogBus({ db: nowhere, logger });
    },
    topicName: (label) => `${prefix}${label}`,
    async holdAppend(item) {
      // A connection of its own, as another process's append would have.
      const other = connectPostgres({ url, poolSize: 1 });
      extra.push(other);
      let appended!: () => void;
      let release!: () => void;
      const isAppended = new Promise<void>((r) => (appended = r));
      const gate = new Promise<void>((r) => (release = r));
      const committed = other.tx(async (tx) => {
        await appendRecords(tx, [item]);
        appended();
        await gate;
      });
      await Promise.race([isAppended, committed]);
      return {
        async othersWaiting() {
          const waiting = await queryRow(
            db,
            sql`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
            (r) => Number(r.n),
          );
          return waiting! > 0;
        },
        async commit() {
          release();
          await committed;
        },
      };
    },
  });
}
