import { topicNames, type BusRecord, type TopicNames } from '@shopstream/bus';
import { applyBatch, type ProjectionDefinition, type ProjectionLogic, type Rejected } from '@shopstream/projections';
import { connectPostgres, migrate, queryRows, sql, type Db, type Row } from '@shopstream/db';
import { createLogger } from '@shopstream/telemetry';
import { createTestDatabase, dropTestDatabase, testInfra } from '@shopstream/testkit';

/**
 * Given/when/then for a projection, in the spirit of Emmett's PostgreSQLProjectionSpec: given these records,
 * when the projection applies them, then these rows (and these emitted records, these rejections). Against a
 * real PostgreSQL database of the spec file's own (migrated), without Kafka: each step's records are one batch
 * of one partition, applied by the runner's own applyBatch (decode, dead-letter, checkpoint, apply, outbox), so
 * a record delivered twice is applied once, exactly as in the live projector.
 */

/** A value of the projection's topic, or a record that is not one (a raw value, to test rejections). */
export type SpecRecord<T> = T | RawRecord;

export interface RawRecord {
  raw: string;
  headers?: Record<string, string>;
}

/** A value that the topic's schema does not decode (bad JSON, a wrong shape): it goes to the rejections. */
export const raw = (value: string, headers: Record<string, string> = {}): RawRecord => ({ raw: value, headers });

/** A record the projection emitted, as the outbox relay would publish it, with its value parsed. */
export interface EmittedSpecRecord {
  topic: string;
  key: string;
  value: any;
  headers: Record<string, string>;
}

export interface ThenContext {
  db: Db;
  /** The rows of a query: the then's assertions name them exactly. */
  rows(query: ReturnType<typeof sql>): Promise<Row[]>;
  /** What the steps emitted, in order (the outbox's rows). */
  emitted: EmittedSpecRecord[];
  /** What the runner rejected (would dead-letter), with why; values as text. */
  rejected: { value: string; reason: string }[];
  /** Records applied, over every step. */
  applied: number;
}

export interface Scenario<T> {
  /** One more batch, applied after the previous ones. */
  when(...records: SpecRecord<T>[]): Scenario<T>;
  /** Applies every step in order on emptied tables, then runs the assertions. */
  then(check: (ctx: ThenContext) => Promise<void> | void): Promise<void>;
}

export interface ProjectionSpec<T> {
  db: Db;
  topics: TopicNames;
  /** A new scenario: its first batch. The projection's tables, its checkpoints and the outbox start empty. */
  given(...records: SpecRecord<T>[]): Scenario<T>;
  close(): Promise<void>;
}

export interface ProjectionSpecOptions {
  /** Rows the projection reads but does not own (flows for the flow matcher), written before it is opened. */
  seed?: (db: Db) => Promise<void>;
  /** The log timestamp of the n-th record of a scenario (from 0). Default: 2026-01-01T00:00:00Z + n seconds. */
  timestampOf?: (n: number) => number;
}

const BASE_TIME = Date.parse('2026-01-01T00:00:00.000Z');

/** Opens a projection on a new migrated test database; `close` drops it. */
export async function projectionSpec<T>(def: ProjectionDefinition<T>, opts: ProjectionSpecOptions = {}): Promise<ProjectionSpec<T>> {
  const url = await createTestDatabase(testInfra().databaseUrl);
  const db = connectPostgres({ url, poolSize: 4, applicationName: `spec-${def.name}` });
  await migrate(db);
  await opts.seed?.(db);
  const logger = createLogger(`spec-${def.name}`, process.env.TEST_LOG_LEVEL ?? 'silent');
  const topics = topicNames('spec.');
  const topic = def.source(topics);
  const timestampOf = opts.timestampOf ?? ((n: number) => BASE_TIME + n * 1000);
  let logic: ProjectionLogic<T> | undefined;

  const toBusRecord = (r: SpecRecord<T>, offset: number): BusRecord => {
    const isRaw = typeof r === 'object' && r !== null && 'raw' in r && typeof (r as RawRecord).raw === 'string';
    const value = isRaw ? (r as RawRecord).raw : JSON.stringify(r);
    const headers = isRaw ? ((r as RawRecord).headers ?? {}) : {};
    return { topic, partition: 0, offset: String(offset), key: null, value: Buffer.from(value), headers, timestamp: timestampOf(offset) };
  };

  return {
    db,
    topics,
    given(...first) {
      const steps: SpecRecord<T>[][] = [first];
      const scenario: Scenario<T> = {
        when(...records) {
          steps.push(records);
          return scenario;
        },
        async then(check) {
          const tables = [...def.tables, 'projection_offsets', 'outbox'];
          await db.query(
            sql`TRUNCATE ${sql.join(
              tables.map((t) => sql.ident(t)),
              sql`, `,
            )}`,
          );
          // Opened once, after the seed: state it holds (the flow matcher's index) reflects the given rows.
          logic ??= await def.open({ db, logger, topics });
          const rejected: Rejected[] = [];
          const mode = { checkpointGroup: `spec-${def.name}`, emit: true, reject: async (r: Rejected[]) => void rejected.push(...r) };
          let offset = 0;
          let applied = 0;
          for (const step of steps) {
            if (step.length === 0) continue;
            const records = step.map((r) => toBusRecord(r, offset++));
            applied += (await applyBatch(def, logic, db, mode, { topic, partition: 0, records }, logger)).applied;
          }
          const emitted = await queryRows(db, sql`SELECT topic, key, value, headers FROM outbox ORDER BY seq`, (o) => ({
            topic: String(o.topic),
            key: String(o.key),
            value: JSON.parse(String(o.value)),
            headers: o.headers as Record<string, string>,
          }));
          await check({
            db,
            rows: (q) => db.query(q),
            emitted,
            rejected: rejected.map((r) => ({ value: r.record.value.toString('utf8'), reason: r.reason })),
            applied,
          });
        },
      };
      return scenario;
    },
    async close() {
      await logic?.close?.();
      await db.close();
      await dropTestDatabase(url);
    },
  };
}
