import { createHash } from 'node:crypto';
import { readdir, readFile, stat } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { sql, type Db } from './db.js';

const here = path.dirname(fileURLToPath(import.meta.url));
/** The workspace's packages, each with the migrations of the tables it owns beside its code (packages/<name>/migrations/). */
const packagesDir = path.resolve(here, '../..');
/** The workspace's services, each with its migrations beside its code (services/<name>/migrations/). */
const servicesDir = path.resolve(here, '../../../services');

/** One owner's migrations: a folder of `NNN_name.sql` files. A service declares its own (defineService). */
export interface MigrationSource {
  owner: string;
  dir: string;
}

const isDirectory = (p: string) =>
  stat(p).then(
    (s) => s.isDirectory(),
    () => false,
  );

/**
 * Every <dir>/<name>/migrations/ folder, owned by <name>. A .sql file outside an owner's migrations/ folder (in
 * `dir`, or beside a package's code) is refused: a migration belongs in its owner's folder.
 */
async function ownersMigrations(dir: string, strays: boolean): Promise<MigrationSource[]> {
  const sources: MigrationSource[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    if (!entry.isDirectory()) {
      if (strays && entry.name.endsWith('.sql')) throw new Error(`${entry.name}: a migration belongs in its owner's folder (<package>/migrations/)`);
      continue;
    }
    if (strays)
      for (const inside of await readdir(path.join(dir, entry.name))) {
        if (inside.endsWith('.sql')) throw new Error(`${entry.name}/${inside}: a migration belongs in its owner's folder (${entry.name}/migrations/)`);
      }
    const migrations = path.join(dir, entry.name, 'migrations');
    if (await isDirectory(migrations)) sources.push({ owner: entry.name, dir: migrations });
  }
  return sources;
}

/**
 * The packages' migration folders (packages/<package>/migrations/): the tables every service builds on (bus, projections,
 * runtime, http, flows, privacy). They run before the services' parts of one step.
 */
export async function packageMigrations(dir = packagesDir): Promise<MigrationSource[]> {
  return ownersMigrations(dir, true);
}

/**
 * Every services/<name>/migrations/ folder of the workspace: what a process that runs one service alone (its
 * main.ts, a test, the benchmark) applies, since it does not import its siblings' declarations. A test
 * (services/all-in-one) keeps this equal to what the declarations say.
 */
export async function workspaceServiceMigrations(dir = servicesDir): Promise<MigrationSource[]> {
  return ownersMigrations(dir, false);
}

/**
 * One migration step: a file name (`003_conversations.sql`), as schema_migrations records it, and its parts, one
 * per owner that has a file of that name. A step that once was one file keeps its name when its tables went to
 * different owners, so a database that applied it never applies it again.
 */
export interface MigrationStep {
  name: string;
  parts: { owner: string; file: string }[];
}

/**
 * Every step of the packages' folders and of `services` (default: every service folder of the workspace), in name
 * order; a step's parts run the packages' first, then the services', each group by owner name.
 */
export async function migrationSteps(services?: MigrationSource[], packagesFolder = packagesDir): Promise<MigrationStep[]> {
  const packages = await packageMigrations(packagesFolder);
  const owned = services ?? (await workspaceServiceMigrations());
  const byName = (a: MigrationSource, b: MigrationSource) => (a.owner < b.owner ? -1 : a.owner > b.owner ? 1 : 0);
  const sources = [...packages.sort(byName), ...[...owned].sort(byName)];
  const seen = new Set<string>();
  for (const s of sources) {
    if (seen.has(s.owner)) throw new Error(`two migration folders for owner ${s.owner}`);
    seen.add(s.owner);
  }
  const steps = new Map<string, MigrationStep>();
  for (const source of sources) {
    for (const entry of await readdir(source.dir, { withFileTypes: true })) {
      // A folder inside an owner's: the layout before packages' migrations moved beside their code
      // (packages/db/migrations/<package>/), whose files would otherwise be skipped without a word.
      if (entry.isDirectory()) throw new Error(`${path.join(source.dir, entry.name)}: a migrations folder holds its owner's .sql files, no folders`);
      if (!entry.name.endsWith('.sql')) continue;
      const step = steps.get(entry.name) ?? { name: entry.name, parts: [] };
      step.parts.push({ owner: source.owner, file: path.join(source.dir, entry.name) });
      steps.set(entry.name, step);
    }
  }
  return [...steps.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/**
 * A step's checksum: SHA-256 over its parts' own SHA-256s (of the file's text, line endings as LF), sorted. A
 * part moved unchanged to another owner's folder keeps the step's checksum; an edited byte does not.
 */
export function stepChecksum(texts: string[]): string {
  const parts = texts.map((t) => createHash('sha256').update(t.replace(/\r\n/g, '\n'), 'utf8').digest('hex')).sort();
  return createHash('sha256').update(parts.join('\n')).digest('hex');
}

/** A migration step that was applied has changed on disk since: migrate refuses to run. */
export class MigrationChangedError extends Error {
  constructor(
    readonly step: string,
    readonly files: string[],
  ) {
    super(
      `migration ${step} was applied to this database and ${files.length > 1 ? `one of its files (${files.join(', ')})` : `its file ${files[0]}`} has changed since. ` +
        'Restore the text that was applied and put the change in a new migration.',
    );
    this.name = 'MigrationChangedError';
  }
}

/**
 * Applies every migration step not yet applied, in name order, each in its own transaction (all its parts).
 * First, under the migration lock, checks every applied step against its files' checksum (schema_migrations.
 * checksum): an edited applied step throws MigrationChangedError and nothing runs; a step applied before
 * checksums were recorded gets its checksum now, from the files as they are.
 */
export async function migrate(db: Db, log: (msg: string) => void = () => {}, services?: MigrationSource[], packagesFolder = packagesDir): Promise<string[]> {
  const steps = await Promise.all(
    (await migrationSteps(services, packagesFolder)).map(async (step) => {
      const texts = await Promise.all(step.parts.map((p) => readFile(p.file, 'utf8')));
      return { ...step, texts, checksum: stepChecksum(texts) };
    }),
  );
  const applied: string[] = [];
  let pending = steps;
  // Under the same lock as the migrations: two services starting at once on a new database would otherwise
  // race on CREATE TABLE IF NOT EXISTS, and one fail on pg_type's unique index.
  await db.tx(async (tx) => {
    await tx.query(sql`SELECT pg_advisory_xact_lock(74201)`);
    await tx.query(sql`CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
    await tx.query(sql`ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum text`);
    const rows = (await tx.query(sql`SELECT name, checksum FROM schema_migrations`)) as { name: string; checksum: string | null }[];
    const recorded = new Map(rows.map((r) => [r.name, r.checksum]));
    pending = steps.filter((s) => !recorded.has(s.name));
    for (const step of steps) {
      if (!recorded.has(step.name)) continue;
      const checksum = recorded.get(step.name);
      if (checksum === null) {
        await tx.query(sql`UPDATE schema_migrations SET checksum = ${step.checksum} WHERE name = ${step.name}`);
        log(`recorded the checksum of migration ${step.name}, applied before checksums`);
      } else if (checksum !== step.checksum) {
        throw new MigrationChangedError(
          step.name,
          step.parts.map((p) => p.file),
        );
      }
    }
  });
  // Each pending step checks again under the lock: another process may have applied it since.
  for (const step of pending) {
    const did = await db.tx(async (tx) => {
      // Several services may start at once against one database: the lock makes them take turns.
      await tx.query(sql`SELECT pg_advisory_xact_lock(74201)`);
      const done = await tx.query(sql`SELECT 1 FROM schema_migrations WHERE name = ${step.name}`);
      if (done.length > 0) return false;
      for (const text of step.texts) await tx.query(sql.__dangerous__rawValue(text));
      await tx.query(sql`INSERT INTO schema_migrations (name, checksum) VALUES (${step.name}, ${step.checksum})`);
      return true;
    });
    if (did) {
      applied.push(step.name);
      log(`applied migration ${step.name}`);
    }
  }
  return applied;
}
