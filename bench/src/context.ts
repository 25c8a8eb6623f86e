import { randomBytes, randomUUID } from 'node:crypto';
import path from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { createKafkaBus, ownedTopicSpecs, topicNames, topicOf, type TopicNames } from '@shopstream/bus';
import { loadEnv } from '@shopstream/config';
import { createLogger } from '@shopstream/telemetry';
import { connectPostgres, migrate, queryRows, sql, type Db } from '@shopstream/db';
import { makeDataKeys, openKeyring } from '@shopstream/privacy';
import { spawnChild, type Child } from './children.js';
import { cpuMeter, type CpuUse } from '@shopstream/testkit/cpu';
import { freePort } from '@shopstream/testkit';
import { databaseUrl, dropDatabase, freshDatabase, REPO_ROOT, type Infra } from './infra.js';
import type { LoadResult, LoadSpec, Shop } from './loadProcess.js';
import { CONTACT_POOL } from './events.js';

export interface Options {
  durationMs: number;
  warmupMs: number;
  /** `--profile`: V8 CPU profiles of the server processes into bench/results/profiles. */
  profile: boolean;
  logLevel: string;
  conversations: number;
  events: number;
  concurrency?: number;
  keep: boolean;
  /** The Kafka adapters (KAFKA_CLIENT) the ingest scenarios run, in order; those this checkout lacks are skipped. */
  kafkaClients: string[];
}

export const PARTITIONS = 12;

/** A data key for every contact without one, made and wrapped as ingest makes them, under the deployment's master key. */
async function seedDataKeys(db: Db): Promise<void> {
  const keyring = await openKeyring({ env: process.env, db, logger: createLogger('bench', 'warn') });
  const pairs = await queryRows(
    db,
    sql`SELECT c.shop_id, c.id FROM contacts c WHERE NOT EXISTS (SELECT 1 FROM contact_keys k WHERE k.shop_id = c.shop_id AND k.contact_id = c.id)`,
    (r) => ({ shop: String(r.shop_id), contact: String(r.id) }),
  );
  for (let at = 0; at < pairs.length; at += 5_000) {
    const made = makeDataKeys(keyring, pairs.slice(at, at + 5_000));
    await db.query(sql`
      INSERT INTO contact_keys (shop_id, contact_id, key_id, master_id, wrapped)
      SELECT * FROM unnest(${made.map((m) => m.shop)}::uuid[], ${made.map((m) => m.contact)}::uuid[], ${made.map((m) => m.keyId)}::uuid[],
                           ${made.map((m) => m.masterId)}::text[], ${made.map((m) => m.wrapped)}::text[])`);
  }
}

/** The bare producer baselines' topic (Bench.bareTopic), made beside the scenario's own with the same settings. */
const BARE_TOPIC = { name: 'bench-bare-events', role: 'source' } as const;

/** What one scenario works on: its own database and topics on the shared broker, shops and a key. */
export class Bench {
  readonly topics: TopicNames;
  /**
   * The topic the bare producer baselines write to: the `events` topic's settings under another name, so the
   * services a scenario measures never read the baseline's records (an all-in-one started after its baseline
   * used to work off the bare producer's hundreds of thousands of records through every phase it measured).
   */
  readonly bareTopic: string;
  readonly shops: Shop[];
  readonly db: Db;
  private readonly children = new Set<Child>();
  private constructor(
    readonly scenario: string,
    readonly infra: Infra,
    readonly opts: Options,
    readonly databaseName: string,
    readonly databaseUrl: string,
    readonly prefix: string,
  ) {
    this.topics = topicNames(prefix);
    this.bareTopic = topicOf(this.topics, BARE_TOPIC);
    const key = `bench_${randomBytes(24).toString('base64url')}`;
    this.shops = Array.from({ length: 8 }, () => ({ shopId: randomUUID(), key }));
    this.db = connectPostgres({ url: databaseUrl, poolSize: 4, applicationName: 'shopstream-bench' });
  }

  /** A fresh database with the schema, and a topic prefix no earlier run used. */
  static async open(scenario: string, infra: Infra, opts: Options, dbName = `bench_${scenario.replaceAll('-', '_')}`, fresh = true): Promise<Bench> {
    const url = fresh ? await freshDatabase(infra.adminUrl, dbName) : databaseUrl(infra.adminUrl, dbName);
    const b = new Bench(scenario, infra, opts, dbName, url, `bench-${scenario}-${randomBytes(3).toString('hex')}.`);
    await migrate(b.db);
    return b;
  }

  /**
   * Returning customers: the contacts of eventMaker's pool (email, phone, remote_id or two of them, as it
   * draws them) already exist in every shop, but for one in twenty, which the load creates. Then ANALYZE, as
   * autovacuum would long have done on a real shop's table: without statistics the planner reads a fresh
   * table's contact look-ups as scans of the whole shop.
   */
  async seedContacts(pool = CONTACT_POOL, db: Db = this.db): Promise<number> {
    const r = sql`(i % 10)`;
    await db.query(sql`
      INSERT INTO contacts (shop_id, id, email, phone, remote_id, name)
      SELECT s.shop_id, gen_random_uuid(),
        CASE WHEN ${r} < 6 OR ${r} = 9 THEN 'customer' || i || '@example.com' END,
        CASE WHEN ${r} IN (6, 7, 9) THEN '+336' || right((10000000 + i)::text, 8) END,
        CASE WHEN ${r} = 8 THEN 'cust-' || i END,
        CASE WHEN ${r} < 6 AND i % 3 = 0 THEN 'Customer ' || i END
      FROM unnest(${this.shops.map((x) => x.shopId)}::uuid[]) AS s(shop_id), generate_series(0, ${pool - 1}::int) AS i
      WHERE i % 20 <> 7`);
    // Returning customers came through ingest, which gave each one a data key on its first event (docs/privacy.md):
    // made here the same way, so the load finds their keys rather than making one per returning contact.
    // BENCH_KEYLESS_CONTACTS=1 leaves them without: the first hours after deploying crypto-shredding.
    if (process.env.BENCH_KEYLESS_CONTACTS !== '1') await seedDataKeys(db);
    await db.query(sql`ANALYZE contacts`);
    return Number((await db.query(sql`SELECT count(*)::int AS n FROM contacts`))[0].n);
  }

  /** The environment of a Shopstream process on this scenario's database and topics. */
  env(): Record<string, string> {
    return {
      DATABASE_URL: this.databaseUrl,
      KAFKA_BROKERS: this.infra.brokers.join(','),
      KAFKA_PARTITIONS: String(PARTITIONS),
      TOPIC_PREFIX: this.prefix,
      CONSUMER_GROUP_PREFIX: this.prefix,
      BOOTSTRAP_API_KEYS: `${this.shops[0].key}=${this.shops.map((s) => s.shopId).join(',')}`,
      LOG_LEVEL: this.opts.logLevel,
      CURSOR_SECRET: 'bench-cursor-secret-0123456789abcdef',
      // The export's limit is 60 a minute per key and shop: the benchmark measures the query, not the limit.
      EXPORT_RATE_LIMIT_PER_MINUTE: '1000000000',
      // One key posts tens of thousands of events a second: the benchmark measures ingest, not its per-key limit.
      INGEST_RATE_LIMIT_PER_SECOND: '0',
      INGEST_RATE_LIMIT_PER_MINUTE: '0',
    };
  }

  /** One Shopstream process running `services`; resolves when it serves. */
  async server(services: string[], extraEnv: Record<string, string> = {}): Promise<{ child: Child; baseUrl: string }> {
    const name = services.join('+');
    const child = spawnChild(name, 'serverProcess.ts', {
      args: [services.join(',')],
      env: { ...this.env(), ...extraEnv },
      cpuProfDir: this.opts.profile ? path.join(REPO_ROOT, 'bench/results/profiles', this.scenario) : undefined,
    });
    this.children.add(child);
    const { port } = await child.next<{ port: number }>('ready', 120_000);
    return { child, baseUrl: `http://127.0.0.1:${port}` };
  }

  /**
   * The all-in-one as `pnpm start` runs it (services/all-in-one/src/main.ts through tsx: its consumer thread, its
   * embedded database when DATABASE_URL is empty), on a free port, on this scenario's environment and `extraEnv`;
   * resolves once /readyz answers 200 (its consumers joined). `label` names its log and profile.
   */
  async allInOne(label: string, extraEnv: Record<string, string>): Promise<{ child: Child; baseUrl: string }> {
    const port = await freePort();
    const child = spawnChild(label, '../../services/all-in-one/src/main.ts', {
      env: { ...this.env(), ...extraEnv, PORT: String(port), HOST: '127.0.0.1' },
      // --profile: a V8 CPU profile of the runner's main thread (and one per worker thread), written at its stop.
      cpuProfDir: this.opts.profile ? path.join(REPO_ROOT, 'bench/results/profiles', this.scenario) : undefined,
      // Also when a scenario fails: its cleanup stops every child, and a message would leave this one running.
      stopBySignal: true,
    });
    this.children.add(child);
    const baseUrl = `http://127.0.0.1:${port}`;
    // An embedded start makes its database first (initdb, migrations): minutes on a busy machine.
    const deadline = Date.now() + 180_000;
    for (;;) {
      if (child.process.exitCode !== null) throw new Error(`${label} exited (code ${child.process.exitCode}); log: ${child.logFile}`);
      const ready = await fetch(`${baseUrl}/readyz`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (ready) return { child, baseUrl };
      if (Date.now() > deadline) throw new Error(`${label} was not ready within 180 s; log: ${child.logFile}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  async stopChild(child: Child): Promise<void> {
    this.children.delete(child);
    await child.stop();
  }

  /** Runs one load in a fresh generator process, metering CPU; onMessage sees its other messages. */
  async load(
    spec: LoadSpec,
    watch: Record<string, Child | undefined> = {},
    onMessage?: (m: any) => void,
    /** The database whose counters the phase reports (default this scenario's; the embedded mode's is its own). */
    counters: () => Promise<Record<string, number>> = () => this.dbCounters(),
  ): Promise<{ result: LoadResult; cpu: CpuUse; database: Record<string, number> }> {
    const gen = spawnChild(`load-${spec.mode}`, 'loadProcess.ts');
    this.children.add(gen);
    try {
      await gen.next('ready', 60_000);
      if (onMessage) gen.process.on('message', (m: any) => m?.type !== 'result' && m?.type !== 'ready' && onMessage(m));
      gen.send({ type: 'run', spec });
      // CPU is metered over the measured part only, once the warm-up is over.
      await new Promise((r) => setTimeout(r, spec.warmupMs));
      const pids = {
        bench: process.pid,
        load: gen.pid,
        // The broker apart from `others` (then mostly PostgreSQL): what a phase costs it shows there.
        ...(this.infra.brokerPid ? { broker: this.infra.brokerPid } : {}),
        ...Object.fromEntries(Object.entries(watch).map(([k, c]) => [k, c?.pid])),
      };
      const meter = cpuMeter(pids);
      const db0 = await counters();
      const done = gen.next<{ result: LoadResult }>('result', spec.durationMs + spec.warmupMs + 120_000);
      await Promise.race([done, new Promise((r) => setTimeout(r, spec.durationMs))]);
      const cpu = meter.stop();
      const db1 = await counters();
      const result = (await done).result;
      const database = Object.fromEntries(Object.entries(db1).map(([k, v]) => [k, v - db0[k]]));
      return {
        result,
        cpu,
        database: { ...database, transactionsPerRequest: result.requests ? Number((database.xact_commit / result.requests).toFixed(2)) : 0 },
      };
    } finally {
      this.children.delete(gen);
      await gen.stop(5_000);
    }
  }

  /**
   * This database's cumulative counters (pg_stat_database): transactions (every statement outside a
   * transaction is one), rows written and read. Postgres publishes them about once a second.
   */
  async dbCounters(db: Db = this.db, databaseName: string = this.databaseName): Promise<Record<string, number>> {
    const [r] = await db.query(sql`
      SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_fetched, blks_read, blks_hit
      FROM pg_stat_database WHERE datname = ${databaseName}`);
    return Object.fromEntries(Object.entries(r).map(([k, v]) => [k, Number(v)]));
  }

  kafka(clientId = 'shopstream-bench'): Kafka {
    return new Kafka({ clientId, brokers: this.infra.brokers, logLevel: logLevel.WARN });
  }

  /**
   * Creates this scenario's topics now, as the services would at start (the bus's ensureTopics with the
   * services' specs and settings: max.message.bytes, retention), with the services' partition count.
   */
  async createTopics(): Promise<void> {
    const bus = await createKafkaBus({
      brokers: this.infra.brokers,
      clientId: 'shopstream-bench-topics',
      replicationFactor: 1,
      logger: createLogger('bench', 'warn'),
    });
    try {
      await bus.ensureTopics(
        ownedTopicSpecs(this.topics, { partitions: PARTITIONS, derivedRetentionMs: loadEnv({}).DERIVED_TOPIC_RETENTION_MS }, [BARE_TOPIC]),
      );
    } finally {
      await bus.close();
    }
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.children].map((c) => c.stop(10_000)));
    await this.db.close();
    const admin = this.kafka().admin();
    try {
      await admin.connect();
      const mine = (await admin.listTopics()).filter((t) => t.startsWith(this.prefix));
      if (mine.length > 0) await admin.deleteTopics({ topics: mine });
    } catch (e) {
      console.error(`could not delete the topics of ${this.prefix}: ${String(e)}`);
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
    // Only the export's seeded read model is worth keeping: it takes minutes to make, the others seconds.
    if (!(this.opts.keep && this.scenario === 'export')) await dropDatabase(this.infra.adminUrl, this.databaseName);
  }
}
