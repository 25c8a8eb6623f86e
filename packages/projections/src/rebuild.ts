import { randomUUID } from 'node:crypto';
import { isDatabaseUnavailable, isDeadlock, isLockNotAvailable, queryRows, sql, type Db, type Queryable, type Row } from '@shopstream/db';
import type { Logger } from '@shopstream/telemetry';
import {
  etaSeconds,
  partitionLag,
  recordsBehind,
  recordsHeld,
  totalLag,
  UnknownTopicError,
  type Bus,
  type Subscription,
  type TopicNames,
} from '@shopstream/bus';
import { relayOutbox, type EmittedRecord } from './outbox.js';
import { applyBatch, liveGroupId, pause, type ApplyMode, type MasterKeySettings, type ProjectionDefinition } from './projection.js';

/** A rebuild that must not start: the message says why; nothing was changed. */
export class RebuildRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RebuildRefusedError';
  }
}

/** A rebuild that lost its consumer or its database: it stopped and cleaned up; the message names the cause. */
export class RebuildStalledError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'RebuildStalledError';
  }
}

export interface RebuildProgress {
  /** Records applied to the new generation so far. */
  applied: number;
  /** Records per second since the start. */
  perSecond: number;
  /** Records the new generation still lacks to reach the live projection's position. */
  behind: number;
  /** Seconds until it has caught up at the current rate, when it can be told. */
  etaSeconds: number | null;
  phase: 'building' | 'switching' | 'switched';
}

export interface RebuildOptions {
  bus: Bus;
  db: Db;
  logger: Logger;
  topics: TopicNames;
  groupPrefix: string;
  /** The process's master key settings (ProjectionDeps.env). */
  env?: MasterKeySettings;
  /** Keep the old generation's tables (in schema `oldSchema`) instead of dropping them after the switch. */
  keepOld?: boolean;
  onProgress?(p: RebuildProgress): void;
  progressIntervalMs?: number;
  /**
   * How long the rebuild waits for a consumer that delivers nothing while records remain, or for a database
   * that does not answer, before it gives up (RebuildStalledError). Default 30 s.
   */
  deadAfterMs?: number;
}

export interface RebuildResult {
  id: string;
  applied: number;
  /** Records skipped as unusable (they were dead-lettered when the live projection met them). */
  rejected: number;
  seconds: number;
  /** Where the old generation's tables are, when kept. */
  keptSchema: string | null;
  /** Side effects the live run never emitted (records it dead-lettered that the rebuild applied), emitted now. */
  emitted: number;
}

/** A rebuild whose heartbeat is older than this is taken as dead (its process was killed). */
const STALE_AFTER_SECONDS = 15;
const HEARTBEAT_MS = 2_000;
const DEAD_AFTER_MS = 30_000;
/**
 * How long the switch waits for the live tables' lock: readers that arrive meanwhile queue behind it, so it
 * gives up well before the pool's 2 s queue timeout (which would open the readers' circuit breaker) and
 * tries again.
 */
const TABLE_LOCK_TIMEOUT = '500ms';
/** How long the switch waits for the live projector's checkpoints: a batch in hand holds one; no reader waits. */
const CHECKPOINT_LOCK_TIMEOUT = '5s';
/** The new generation's own outbox: what the rebuild emits waits there until the switch. */
const BUILD_OUTBOX = 'outbox';
/**
 * The switch is tried once the rebuild is at most this many records behind the live checkpoints: it holds them
 * and waits (3 s at most) for the rebuild to apply the rest. Waiting to be 0 behind first never came while
 * events kept arriving: the rebuild applies only what the live run already has, so under a steady flow it
 * trails by the records of the last moments (2 to 6 in projections.rebuildUnattended.spec.ts, which took
 * 137 s instead of 23 on @platformatic/kafka).
 */
const SWITCH_WHEN_BEHIND = 1_000;

const snake = (name: string) => name.replace(/[^a-z0-9]+/gi, '_').toLowerCase();

/**
 * A quoted identifier of up to 63 bytes, Postgres' own limit: the index names Postgres makes up reach it,
 * and @databases' sql.ident refuses anything over 60.
 */
const ident = (...parts: string[]) => sql.__dangerous__rawValue(parts.map((p) => `"${p.replace(/"/g, '""')}"`).join('.'));

/** The checkpoints of a group for one topic: partition -> next offset (absent partitions are at 0). */
async function checkpoints(q: Queryable, groupId: string, topic: string): Promise<Map<number, bigint>> {
  return new Map(
    await queryRows(
      q,
      sql`SELECT partition, next_offset FROM projection_offsets WHERE group_id = ${groupId} AND topic = ${topic}`,
      (r) => [Number(r.partition), BigInt(r.next_offset as string)] as const,
    ),
  );
}

/** Records the rebuild's checkpoints still lack to equal the live ones. */
async function behindLive(q: Queryable, liveGroup: string, rebuildGroup: string, topic: string): Promise<number> {
  // One after the other: q may be a transaction, which runs one statement at a time.
  const live = await checkpoints(q, liveGroup, topic);
  const rebuilt = await checkpoints(q, rebuildGroup, topic);
  return recordsBehind(live, rebuilt);
}

/**
 * Gives the new generation's indexes the names the current generation's have (LIKE ... INCLUDING ALL makes
 * up its own), matched by definition, so the tables are interchangeable after the switch.
 */
async function copyIndexNames(tx: Queryable, schema: string, table: string): Promise<void> {
  const shape = (def: string, name: string, owner: string) => def.replace(`INDEX ${name} ON ${owner}.${table} `, 'INDEX ON ');
  const indexRow = (r: Row) => ({ indexname: String(r.indexname), indexdef: String(r.indexdef) });
  const current = await queryRows(tx, sql`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = ${table}`, indexRow);
  const made = await queryRows(tx, sql`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = ${schema} AND tablename = ${table}`, indexRow);
  const wanted = new Map(current.map((r) => [shape(r.indexdef, r.indexname, 'public'), r.indexname]));
  const renames: { from: string; to: string }[] = [];
  for (const r of made) {
    const to = wanted.get(shape(r.indexdef, r.indexname, schema));
    if (to && to !== r.indexname) renames.push({ from: r.indexname, to });
  }
  // Through temporary names: a wanted name may be one LIKE gave another index.
  for (const [i, r] of renames.entries()) await tx.query(sql`ALTER INDEX ${ident(schema, r.from)} RENAME TO ${ident(`shopstream_ix_${i}`)}`);
  for (const [i, r] of renames.entries()) await tx.query(sql`ALTER INDEX ${ident(schema, `shopstream_ix_${i}`)} RENAME TO ${ident(r.to)}`);
}

/** The `shop_id` and `id` an emitted record announces (see ProjectionLogic.apply). */
function announced(r: EmittedRecord): { shopId: string; id: string } {
  let v: unknown;
  try {
    v = JSON.parse(typeof r.value === 'string' ? r.value : r.value.toString('utf8'));
  } catch {
    v = null;
  }
  const o = v as { shop_id?: unknown; id?: unknown } | null;
  if (typeof o?.shop_id !== 'string' || typeof o.id !== 'string') {
    throw new Error(`A record emitted to ${r.topic} carries no shop_id and id: a rebuild cannot tell whether the live run emitted it.`);
  }
  return { shopId: o.shop_id, id: o.id };
}

/**
 * The emitted records whose row the live generation's first table lacks: the live run never applied their
 * source record (it dead-lettered it), so it never emitted them either.
 */
async function unemittedBy(tx: Queryable, liveTable: string, emitted: EmittedRecord[]): Promise<EmittedRecord[]> {
  const keys = emitted.map(announced);
  const missing = await queryRows(
    tx,
    sql`
    SELECT k.i FROM unnest(${keys.map((k) => k.shopId)}::uuid[], ${keys.map((k) => k.id)}::uuid[]) WITH ORDINALITY AS k(shop_id, id, i)
    WHERE NOT EXISTS (SELECT 1 FROM ${ident('public', liveTable)} l WHERE l.shop_id = k.shop_id AND l.id = k.id)`,
    (r) => Number(r.i) - 1,
  );
  return missing.map((i) => emitted[i]);
}

/**
 * Leftovers of rebuilds of this projection that died without cleaning up (a kill -9, a lost database):
 * schemas no live rebuild owns (`rebuild_*` being built, `retired_*` switched but not dropped unless kept with
 * --keep-old, which the rebuild's row names), and checkpoints of rebuild groups. Runs under the rebuild lock.
 */
async function dropLeftovers(tx: Queryable, projection: string, liveGroup: string): Promise<string[]> {
  const prefix = snake(projection);
  const like = (kind: string) => `${kind}\\_${prefix.replace(/_/g, '\\_')}\\_%`;
  const orphans = await queryRows(
    tx,
    sql`
    SELECT nspname FROM pg_namespace n
    WHERE (nspname LIKE ${like('rebuild')} OR nspname LIKE ${like('retired')})
      AND NOT EXISTS (SELECT 1 FROM projection_rebuilds r WHERE r.projection = ${projection} AND (r.old_schema = n.nspname OR (r.build_schema = n.nspname AND r.status = 'running')))`,
    (r) => String(r.nspname),
  );
  for (const s of orphans) await tx.query(sql`DROP SCHEMA ${ident(s)} CASCADE`);
  await tx.query(sql`DELETE FROM projection_offsets WHERE group_id LIKE ${`${liveGroup.replace(/[\\%_]/g, '\\$&')}.rebuild.%`}`);
  return orphans;
}

/**
 * Rebuilds one projection from the first record of its topic while the live projection keeps serving:
 * 1. its tables are copied empty (same columns, constraints and index names) into a new schema;
 * 2. a consumer group of its own reads the topic from offset 0 and applies every record into them, with
 *    the projection's own logic but never past the live projection's checkpoint; what it emits waits in the
 *    new schema's outbox, and only when the live run never emitted it (a record it dead-lettered);
 * 3. once it stands where the live projection stands, its tables are analyzed, and one transaction holds the
 *    live projector's checkpoints (so it applies nothing more), lets the rebuild take the last records the
 *    live run committed meanwhile, locks the live tables (briefly, in the order readers take them), moves the
 *    waiting emitted records to the outbox and swaps the two generations' schemas: reads and the live
 *    projector (which address the tables by name) go on with the new generation, from the live checkpoint,
 *    so nothing is applied twice and no effect is lost or emitted twice;
 * 4. the old generation is dropped (or kept with keepOld).
 * Refused, with nothing changed, when a partition's log no longer starts at offset 0, or another rebuild of
 * the projection is running. Gives up (RebuildStalledError) when its consumer delivers nothing while records
 * remain, or the database does not answer, for deadAfterMs. Cleans up what dead rebuilds left first.
 */
export async function rebuildProjection<T>(def: ProjectionDefinition<T>, o: RebuildOptions): Promise<RebuildResult> {
  const { db, bus } = o;
  const topic = def.source(o.topics);
  const liveGroup = liveGroupId(o.groupPrefix, def);
  const started = Date.now();
  const deadAfterMs = o.deadAfterMs ?? DEAD_AFTER_MS;

  const trimmed = (await bus.offsets(topic)).filter((p) => p.low !== '0');
  if (trimmed.length > 0) {
    throw new RebuildRefusedError(
      `The log of ${topic} no longer starts at offset 0 (${trimmed.map((p) => `partition ${p.partition} starts at ${p.low}`).join(', ')}): ` +
        'records were deleted, so a rebuild would lose what they held. Nothing was changed.',
    );
  }

  const id = randomUUID();
  const tag = `${snake(def.name)}_${id.slice(0, 8)}`;
  const buildSchema = `rebuild_${tag}`;
  const oldSchema = `retired_${tag}`;
  const rebuildGroup = `${liveGroup}.rebuild.${id.slice(0, 8)}`;
  const { stale, dropped } = await db.tx(async (tx) => {
    await tx.query(sql`SELECT pg_advisory_xact_lock(74203, hashtext(${def.name}))`);
    const running = await queryRows(
      tx,
      sql`
      SELECT id, build_schema, group_id, started_at, heartbeat_at > now() - make_interval(secs => ${STALE_AFTER_SECONDS}) AS alive
      FROM projection_rebuilds WHERE projection = ${def.name} AND status = 'running'`,
      (r) => ({
        id: String(r.id),
        build_schema: String(r.build_schema),
        group_id: String(r.group_id),
        started_at: new Date(r.started_at as Date | string),
        alive: r.alive === true,
      }),
    );
    const alive = running.find((r) => r.alive);
    if (alive) {
      throw new RebuildRefusedError(
        `Another rebuild of ${def.name} is running (id ${alive.id}, started ${alive.started_at.toISOString()}). ` +
          '`pnpm cli projections status` shows its progress. Nothing was changed.',
      );
    }
    for (const r of running) {
      await tx.query(
        sql`UPDATE projection_rebuilds SET status = 'abandoned', finished_at = now(), error = 'its process stopped renewing its heartbeat' WHERE id = ${r.id}`,
      );
    }
    const dropped = await dropLeftovers(tx, def.name, liveGroup);
    await tx.query(sql`
      INSERT INTO projection_rebuilds (id, projection, version, build_schema, group_id, status)
      VALUES (${id}, ${def.name}, ${def.version}, ${buildSchema}, ${rebuildGroup}, 'running')`);
    await tx.query(sql`CREATE SCHEMA ${sql.ident(buildSchema)}`);
    for (const t of def.tables) {
      await tx.query(sql`CREATE TABLE ${sql.ident(buildSchema, t)} (LIKE ${sql.ident('public', t)} INCLUDING ALL)`);
      await copyIndexNames(tx, buildSchema, t);
    }
    await tx.query(sql`CREATE TABLE ${sql.ident(buildSchema, BUILD_OUTBOX)} (LIKE public.outbox INCLUDING DEFAULTS)`);
    return { stale: running.map((r) => r.group_id), dropped };
  });

  const log = o.logger.child({ rebuild: id, projection: def.name, group: rebuildGroup });
  if (dropped.length > 0) log.warn({ schemas: dropped }, 'dropped what earlier rebuilds that died left behind');
  // A dead rebuild's group may keep its member until the broker's session timeout: tried now and after the switch.
  const deleteStaleGroups = () =>
    Promise.all(
      stale.map((g) => bus.deleteGroup(g).catch((e) => log.warn({ err: e, staleGroup: g }, 'could not delete the consumer group of a rebuild that died'))),
    );
  await deleteStaleGroups();

  let applied = 0;
  let rejected = 0;
  let switched = false;
  const heartbeat = setInterval(() => {
    db.query(sql`UPDATE projection_rebuilds SET heartbeat_at = now(), applied = ${applied} WHERE id = ${id}`).catch((e) =>
      log.warn({ err: e }, 'could not renew the rebuild heartbeat'),
    );
  }, HEARTBEAT_MS);
  heartbeat.unref();

  let sub: Subscription | null = null;
  let emitted = 0;
  const logic = await def.open({ db, logger: log, topics: o.topics, env: o.env });
  try {
    const mode: ApplyMode = {
      checkpointGroup: rebuildGroup,
      searchPath: buildSchema,
      emit: true,
      unemitted: (tx, records) => unemittedBy(tx, def.tables[0], records),
      async reject(r) {
        rejected += r.length;
      },
    };
    // The consumer's last sign of life: a batch handed over, or a wait for the live checkpoint.
    let consumerSeen = Date.now();
    sub = await bus.consume({
      groupId: rebuildGroup,
      topics: [topic],
      fromBeginning: true,
      handleBatch: async (batch, ctx) => {
        let rest = batch.records;
        while (rest.length > 0) {
          consumerSeen = Date.now();
          if (switched) return;
          // Never past the live checkpoint: what lies beyond it is the live run's to apply (and to emit).
          const limit = (await checkpoints(db, liveGroup, batch.topic)).get(batch.partition) ?? 0n;
          const ready = rest.filter((r) => BigInt(r.offset) < limit);
          if (ready.length > 0) {
            const r = await applyBatch(def, logic, db, mode, { ...batch, records: ready }, log);
            applied += r.applied;
            rest = rest.slice(ready.length);
            continue;
          }
          if (!ctx.isRunning()) throw new Error('the rebuild is stopping');
          await pause(100, ctx);
        }
        consumerSeen = Date.now();
      },
    });
    consumerSeen = Date.now();

    const progressEvery = o.progressIntervalMs ?? 1_000;
    let lastReport = 0;
    const report = (phase: RebuildProgress['phase'], behind: number) => {
      const seconds = (Date.now() - started) / 1000;
      const perSecond = seconds > 0 ? applied / seconds : 0;
      o.onProgress?.({ applied, perSecond, behind, etaSeconds: etaSeconds(behind, perSecond), phase });
    };
    let dbSeen = Date.now();
    let analyzed = false;
    // A switch cut off from the database may have committed: the row says whether it did.
    let switchUncertain = false;
    /** One look at where the rebuild stands, and the switch once it caught up: true once switched. */
    const step = async (): Promise<boolean> => {
      if (switchUncertain) {
        const [row] = await queryRows(db, sql`SELECT status FROM projection_rebuilds WHERE id = ${id}`, (r) => String(r.status));
        if (row === 'switched') return true;
        switchUncertain = false;
      }
      const behind = await behindLive(db, liveGroup, rebuildGroup, topic);
      dbSeen = Date.now();
      if (behind > 0 && Date.now() - consumerSeen > deadAfterMs) {
        throw new RebuildStalledError(
          `The rebuild of ${def.name} gave up: its consumer (group ${rebuildGroup}) has delivered nothing for ${Math.round(deadAfterMs / 1000)} s ` +
            `while ${behind.toLocaleString('en-US')} records remain: it crashed or left its group.`,
        );
      }
      if (Date.now() - lastReport >= progressEvery) {
        report('building', behind);
        lastReport = Date.now();
      }
      // And behind by no more than it applied: the statistics taken next describe most of what the tables will hold.
      if (behind > SWITCH_WHEN_BEHIND || behind > applied) return false;
      // Statistics before the switch: the planner would otherwise guess at the swapped-in tables until
      // autovacuum comes round (the workspace listing took 30 times as long).
      if (!analyzed) {
        for (const t of def.tables) await db.query(sql`ANALYZE ${sql.ident(buildSchema, t)}`);
        analyzed = true;
      }
      report('switching', 0);
      switchUncertain = true;
      const moved = await trySwitch(db, def, {
        id,
        liveGroup,
        rebuildGroup,
        topic,
        buildSchema,
        oldSchema,
        keepOld: o.keepOld === true,
        emits: def.emits(o.topics).length > 0,
        applied: () => applied,
      });
      switchUncertain = false;
      if (moved === null) return false;
      emitted = moved;
      return true;
    };
    for (;;) {
      try {
        if (await step()) break;
      } catch (e) {
        if (!isDatabaseUnavailable(e)) throw e;
        if (Date.now() - dbSeen > deadAfterMs) {
          throw new RebuildStalledError(
            `The rebuild of ${def.name} gave up: the database has not answered for ${Math.round(deadAfterMs / 1000)} s (${(e as Error).message}).`,
            { cause: e },
          );
        }
        await new Promise((r) => setTimeout(r, 500));
        continue;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    switched = true;
    report('switched', 0);
    log.info({ applied, rejected, emitted }, 'rebuild switched to the new generation');
  } catch (e) {
    clearInterval(heartbeat);
    await sub?.stop().catch(() => {});
    await logic.close?.();
    await db
      .tx(async (tx) => {
        await tx.query(
          sql`UPDATE projection_rebuilds SET status = 'failed', finished_at = now(), error = ${String((e as Error).message ?? e).slice(0, 1000)} WHERE id = ${id}`,
        );
        await tx.query(sql`DROP SCHEMA IF EXISTS ${sql.ident(buildSchema)} CASCADE`);
        await tx.query(sql`DELETE FROM projection_offsets WHERE group_id = ${rebuildGroup}`);
      })
      .catch((e2) => log.error({ err: e2 }, 'could not clean up after the failed rebuild: the next rebuild will'));
    await bus.deleteGroup(rebuildGroup).catch(() => {});
    throw e;
  }

  clearInterval(heartbeat);
  await sub.stop();
  await logic.close?.();
  // The live projector's relays would send them within a second or so; sent now, so they go out also when none runs.
  if (emitted > 0) {
    for (const e of def.emits(o.topics)) {
      await relayOutbox({ db, bus, topic: e.topic, legacyName: e.name }).catch((err) =>
        log.warn({ err }, 'could not relay the emitted records; the live relay will'),
      );
    }
  }
  await db.query(sql`DELETE FROM projection_offsets WHERE group_id = ${rebuildGroup}`);
  await bus.deleteGroup(rebuildGroup).catch((e) => log.warn({ err: e }, 'could not delete the rebuild consumer group'));
  await deleteStaleGroups();
  await db.query(sql`UPDATE projection_rebuilds SET applied = ${applied} WHERE id = ${id}`);
  if (!o.keepOld) await db.query(sql`DROP SCHEMA ${sql.ident(oldSchema)} CASCADE`);
  return { id, applied, rejected, seconds: (Date.now() - started) / 1000, keptSchema: o.keepOld ? oldSchema : null, emitted };
}

class NotCaughtUp extends Error {}

/**
 * The switch, in one transaction: hold the live projector's checkpoints (its next batch waits; readers do
 * not), let the rebuild catch up with the live checkpoint it can no longer move, then lock the live tables in
 * the order readers take them (the projection's table order: a reader joining two takes them in that order
 * too), for at most TABLE_LOCK_TIMEOUT, move what the rebuild emitted that the live run never did to the
 * outbox, and swap the schemas. Returns how many emitted records it moved, or null when it did not get its
 * locks or the catch-up in time: everything is released and the caller tries again.
 */
async function trySwitch<T>(
  db: Db,
  def: ProjectionDefinition<T>,
  r: {
    id: string;
    liveGroup: string;
    rebuildGroup: string;
    topic: string;
    buildSchema: string;
    oldSchema: string;
    keepOld: boolean;
    emits: boolean;
    applied(): number;
  },
): Promise<number | null> {
  try {
    return await db.tx(async (tx) => {
      await tx.query(sql`SELECT set_config('lock_timeout', ${CHECKPOINT_LOCK_TIMEOUT}, true)`);
      // Every live batch starts by locking its partition's checkpoint: holding them all keeps the live
      // projector out of its tables without a lock on them. A partition with no checkpoint yet is caught below.
      await tx.query(sql`SELECT partition FROM projection_offsets WHERE group_id = ${r.liveGroup} AND topic = ${r.topic} ORDER BY partition FOR UPDATE`);
      const deadline = Date.now() + 3_000;
      while ((await behindLive(tx, r.liveGroup, r.rebuildGroup, r.topic)) > 0) {
        if (Date.now() > deadline) throw new NotCaughtUp();
        await new Promise((res) => setTimeout(res, 25));
      }
      // Readers queue behind a lock that waits: it waits briefly, and is held only for the swap itself.
      await tx.query(sql`SELECT set_config('lock_timeout', ${TABLE_LOCK_TIMEOUT}, true)`);
      for (const t of def.tables) await tx.query(sql`LOCK TABLE ${sql.ident('public', t)} IN ACCESS EXCLUSIVE MODE`);
      if ((await behindLive(tx, r.liveGroup, r.rebuildGroup, r.topic)) > 0) throw new NotCaughtUp();
      // Projections that emit nothing need not follow the convention the lookup relies on.
      const moved = !r.emits
        ? []
        : await tx.query(sql`
        INSERT INTO public.outbox (topic, key, value, headers)
        SELECT topic, key, value, headers FROM ${sql.ident(r.buildSchema, BUILD_OUTBOX)} o
        WHERE NOT EXISTS (
          SELECT 1 FROM ${ident('public', def.tables[0])} l
          WHERE l.shop_id = (o.value::jsonb ->> 'shop_id')::uuid AND l.id = (o.value::jsonb ->> 'id')::uuid)
        ORDER BY o.seq
        RETURNING seq`);
      await tx.query(sql`DROP TABLE ${sql.ident(r.buildSchema, BUILD_OUTBOX)}`);
      await tx.query(sql`CREATE SCHEMA ${sql.ident(r.oldSchema)}`);
      for (const t of def.tables) {
        await tx.query(sql`ALTER TABLE ${sql.ident('public', t)} SET SCHEMA ${sql.ident(r.oldSchema)}`);
        await tx.query(sql`ALTER TABLE ${sql.ident(r.buildSchema, t)} SET SCHEMA public`);
      }
      await tx.query(sql`DROP SCHEMA ${sql.ident(r.buildSchema)}`);
      // old_schema names only a generation kept on purpose: one left by a rebuild that died before dropping
      // it is an orphan the next rebuild drops.
      await tx.query(sql`
        UPDATE projection_rebuilds SET status = 'switched', old_schema = ${r.keepOld ? r.oldSchema : null}, applied = ${r.applied()}, finished_at = now(), heartbeat_at = now()
        WHERE id = ${r.id}`);
      return moved.length;
    });
  } catch (e) {
    // Not caught up in time, a lock not had in time, or a deadlock with the live projector.
    if (e instanceof NotCaughtUp || isLockNotAvailable(e) || isDeadlock(e)) return null;
    throw e;
  }
}

export interface ProjectionStatus {
  projection: string;
  version: number;
  group: string;
  topic: string;
  emits: string[];
  tables: readonly string[];
  partitions: {
    partition: number;
    /** The next offset the projection will apply, from its checkpoint in Postgres (null: nothing applied yet). */
    applied: string | null;
    logStart: string;
    logEnd: string;
    lag: number;
    lastAppliedAt: string | null;
  }[];
  lag: number;
  lastAppliedAt: string | null;
  deadLetters: number;
  /** Of those, how many `pnpm cli dlq redrive` sent back to the topic. */
  deadLettersRedriven: number;
  rebuild: { id: string; status: string; startedAt: string; finishedAt: string | null; applied: number; running: boolean; error: string | null } | null;
}

/** Where each projection stands: per partition its checkpoint against the log, its dead letters, its rebuilds. */
export async function projectionStatus(
  defs: ProjectionDefinition<unknown>[],
  o: { bus: Bus; db: Db; topics: TopicNames; groupPrefix: string },
): Promise<ProjectionStatus[]> {
  // The projections side by side: each one's round trips (log offsets, its dead letters, three queries) in sequence.
  return Promise.all(
    defs.map(async (def): Promise<ProjectionStatus> => {
      const topic = def.source(o.topics);
      const group = liveGroupId(o.groupPrefix, def);
      const log = await o.bus.offsets(topic);
      const rows = await queryRows(
        o.db,
        sql`SELECT partition, next_offset, updated_at FROM projection_offsets WHERE group_id = ${group} AND topic = ${topic}`,
        (r) => ({ partition: Number(r.partition), nextOffset: BigInt(r.next_offset as string), updatedAt: new Date(r.updated_at as Date | string) }),
      );
      const at = new Map(rows.map((r) => [r.partition, r]));
      const partitions = log.map((p) => {
        const row = at.get(p.partition);
        const applied = row ? row.nextOffset : null;
        return {
          partition: p.partition,
          applied: applied === null ? null : applied.toString(),
          logStart: p.low,
          logEnd: p.high,
          lag: partitionLag(p, applied),
          lastAppliedAt: row ? row.updatedAt.toISOString() : null,
        };
      });
      let deadLetters = 0;
      try {
        deadLetters = recordsHeld(await o.bus.offsets(o.topics.dlq(topic)));
      } catch (e) {
        if (!(e instanceof UnknownTopicError) && !/does not host this topic-partition|UNKNOWN_TOPIC/i.test(String((e as Error).message))) throw e;
      }
      const [redriven] = await queryRows(
        o.db,
        sql`SELECT count(*)::int AS n FROM dlq_redrives WHERE dlq_topic = ${o.topics.dlq(topic)} AND state = 'sent'`,
        (r) => Number(r.n),
      );
      const last = await queryRows(
        o.db,
        sql`
      SELECT id, status, started_at, finished_at, applied, error, heartbeat_at > now() - make_interval(secs => ${STALE_AFTER_SECONDS}) AS alive
      FROM projection_rebuilds WHERE projection = ${def.name} ORDER BY started_at DESC LIMIT 1`,
        (r) => ({
          id: String(r.id),
          status: String(r.status),
          startedAt: new Date(r.started_at as Date | string).toISOString(),
          finishedAt: r.finished_at ? new Date(r.finished_at as Date | string).toISOString() : null,
          applied: Number(r.applied),
          running: r.status === 'running' && r.alive === true,
          error: r.error === null || r.error === undefined ? null : String(r.error),
        }),
      );
      const lastApplied = partitions
        .map((p) => p.lastAppliedAt)
        .filter((x): x is string => x !== null)
        .sort();
      return {
        projection: def.name,
        version: def.version,
        group,
        topic,
        emits: def.emits(o.topics).map((e) => e.topic),
        tables: def.tables,
        partitions,
        lag: totalLag(partitions),
        lastAppliedAt: lastApplied.length > 0 ? lastApplied[lastApplied.length - 1] : null,
        deadLetters,
        deadLettersRedriven: redriven,
        rebuild: last[0] ?? null,
      };
    }),
  );
}
