import { beforeAll, afterAll } from 'vitest';
import { migrate, openPglite, type Db } from '@shopstream/db';
import { createLogger } from '@shopstream/telemetry';
import { uniquePrefix } from '@shopstream/testkit';
import { busConformance } from './conformance/busConformance.js';
import { createPgLogBus } from './pglog/pgLogBus.js';
import { appendRecords } from './pglog/appendRecords.js';

const logger = createLogger('bus-conformance', process.env.TEST_LOG_LEVEL ?? 'silent');
const prefix = uniquePrefix();
let db: Db;

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
  newBus: () => createPgLogBus({ db, logger, pollIntervalMs: 500 }),
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
    return {
      // PGlite is one connection: every other statement queues behind the open transaction by construction.
      othersWaiting: async () => true,
      async commit() {
        release();
        await committed;
      },
    };
  },
});
