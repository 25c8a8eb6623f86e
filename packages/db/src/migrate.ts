import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { sql, type Db } from './db.js';

const migrationsDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../migrations');

/**
 * Who owns tables, one folder each under migrations/ (see migrations/README.md), in the order their parts of one
 * step run: a part may use an earlier owner's tables.
 */
export const migrationOwners = [
  'bus',
  'runtime',
  'http',
  'ingest-api',
  'activity-projector',
  'flows',
  'flow-matcher',
  'conversation-projector',
  'query-api',
  'privacy',
  'all-in-one',
] as const;
export type MigrationOwner = (typeof migrationOwners)[number];

/**
 * One migration step: a file name (`003_conversations.sql`), as schema_migrations records it, and its parts, one
 * per owner that has a file of that name. A step that once was one file keeps its name when its tables went to
 * different owners, so a database that applied it never applies it again.
 */
export interface MigrationStep {
  name: string;
  parts: { owner: MigrationOwner; file: string }[];
}

/** Every step under migrations/<owner>/, in name order, each step's parts in owner order. */
export async function migrationSteps(dir = migrationsDir): Promise<MigrationStep[]> {
  const steps = new Map<string, MigrationStep>();
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (!entry.isDirectory()) {
      if (entry.name.endsWith('.sql')) throw new Error(`migrations/${entry.name}: a migration belongs in its owner's folder (${migrationOwners.join(', ')})`);
      continue;
    }
    const owner = entry.name as MigrationOwner;
    if (!migrationOwners.includes(owner)) throw new Error(`migrations/${entry.name}/: not an owner listed in migrationOwners (packages/db/src/migrate.ts)`);
    for (const name of await readdir(path.join(dir, owner))) {
      if (!name.endsWith('.sql')) continue;
      const step = steps.get(name) ?? { name, parts: [] };
      step.parts.push({ owner, file: path.join(dir, owner, name) });
      steps.set(name, step);
    }
  }
  const order = (o: MigrationOwner) => migrationOwners.indexOf(o);
  return [...steps.values()]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map((s) => ({ ...s, parts: s.parts.sort((a, b) => order(a.owner) - order(b.owner)) }));
}

/** Applies every migration step not yet applied, in name order, each in its own transaction (all its parts). */
export async function migrate(db: Db, log: (msg: string) => void = () => {}): Promise<string[]> {
  const steps = await migrationSteps();
  const applied: string[] = [];
  // Under the same lock as the migrations: two services starting at once on a new database would otherwise
  // race on CREATE TABLE IF NOT EXISTS, and one fail on pg_type's unique index.
  await db.tx(async (tx) => {
    await tx.query(sql`SELECT pg_advisory_xact_lock(74201)`);
    await tx.query(sql`CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
  });
  for (const step of steps) {
    const texts = await Promise.all(step.parts.map((p) => readFile(p.file, 'utf8')));
    const did = await db.tx(async (tx) => {
      // Several services may start at once against one database: the lock makes them take turns.
      await tx.query(sql`SELECT pg_advisory_xact_lock(74201)`);
      const done = await tx.query(sql`SELECT 1 FROM schema_migrations WHERE name = ${step.name}`);
      if (done.length > 0) return false;
      for (const text of texts) await tx.query(sql.__dangerous__rawValue(text));
      await tx.query(sql`INSERT INTO schema_migrations (name) VALUES (${step.name})`);
      return true;
    });
    if (did) {
      applied.push(step.name);
      log(`applied migration ${step.name}`);
    }
  }
  return applied;
}
