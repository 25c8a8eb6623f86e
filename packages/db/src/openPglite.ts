import type { Db } from './db.js';

/**
 * openPglite (./pglite.ts), loaded on first call: @electric-sql/pglite takes 0.1 to 0.5 s to import, which every
 * process on a PostgreSQL server (every service and CLI command with DATABASE_URL, every test file) would
 * otherwise pay for an engine it never opens.
 */
export async function openPglite(dataDir: string | undefined): Promise<Db> {
  return (await import('./pglite.js')).openPglite(dataDir);
}
