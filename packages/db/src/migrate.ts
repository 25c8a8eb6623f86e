import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { sql, type Db } from './db.js';

const migrationsDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../migrations');

/** Applies every migrations/*.sql not yet applied, in file-name order, each in its own transaction. */
export async function migrate(db: Db, log: (msg: string) => void = () => {}): Promise<string[]> {
  const files = (await readdir(migrationsDir)).filter((f) => f.endsWith('.sql')).sort();
  const applied: string[] = [];
  // Under the same lock as the migrations: two services starting at once on a new database would otherwise
  // race on CREATE TABLE IF NOT EXISTS, and one fail on pg_type's unique index.
  await db.tx(async (tx) => {
    await tx.query(sql`SELECT pg_advisory_xact_lock(74201)`);
    await tx.query(sql`CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
  });
  for (const file of files) {
    const text = await readFile(path.join(migrationsDir, file), 'utf8');
    const did = await db.tx(async (tx) => {
      // Several services may start at once against one database: the lock makes them take turns.
      await tx.query(sql`SELECT pg_advisory_xact_lock(74201)`);
      const done = await tx.query(sql`SELECT 1 FROM schema_migrations WHERE name = ${file}`);
      if (done.length > 0) return false;
      await tx.query(sql.__dangerous__rawValue(text));
      await tx.query(sql`INSERT INTO schema_migrations (name) VALUES (${file})`);
      return true;
    });
    if (did) {
      applied.push(file);
      log(`applied migration ${file}`);
    }
  }
  return applied;
}
