import { beforeAll, afterAll } from 'vitest';
import { formatQuery, migrate, openPglite, type Db } from '@shopstream/db';
import { createLogger } from '@shopstream/telemetry';
import { uniquePrefix } from '@shopstream/testkit';
import { busConformance } from './busConformance.js';
import { appendRecords, createPgLogBus } from '@shopstream/bus';

const logger = createLogger('bus-conformance', process.env.TEST_LOG_LEVEL ?? 'silent');
const prefix = uniquePrefix();
let db: Db;
// Appends the buses issue, counted as they reach the database: PGlite runs one statement at a time, so an append
// issued while the held transaction is open waits behind it; the count shows it was issued (and is waiting).
let appendsIssued = 0;
const counting = (): Db => ({
  ...db,
  query: (q) => {
    if (formatQuery(q).text.includes('bus_append(')) appendsIssued++;
    return db.query(q);
  },
});

beforeAll(async () => {
  db = await openPglite(undefined);
  await migrate(db);
});
afterAll(async () => {
  await db?.close();
});

busConformance({
  name: 'Postgres log on PGlite',
  kind: 'pglog',
  features: { consumerGroupsSharePartitions: false, transactionalAppends: true },
  newBus: () => createPgLogBus({ db: counting(), logger, pollIntervalMs: 500 }),
  async unreachableBus() {
    const closed = await openPglite(undefined);
    await closed.close();
    return createPgLogBus({ db: closed, logger });
  },
  topicName: (label) => `${prefix}${label}`,
  async holdAppend(item) {
    let appended!: () => void;
    let release!: () => void;
    const isAppended = new Promise<void>((r) => (appended = r));
    const gate = new Promise<void>((r) => (release = r));
    const committed = db.tx(async (tx) => {
      await appendRecords(tx, [item]);
      appended();
      await gate;
    });
    await isAppended;
    const before = appendsIssued;
    return {
      // PGlite is one connection: an append issued now queues behind the open transaction. It was a constant
      // true, which let the case pass without the later append ever being issued.
      othersWaiting: async () => appendsIssued > before,
      async commit() {
        release();
        await committed;
      },
    };
  },
});
