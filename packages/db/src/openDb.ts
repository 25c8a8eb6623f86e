import { connectPostgres, type Db } from './db.js';
import { openPglite } from './pglite.js';

export type DbConfig = { databaseUrl: string; poolSize?: number; applicationName?: string } | { dataDir: string };

/** The server when a URL is given, else the embedded PGlite in dataDir. */
export async function openDb(cfg: DbConfig): Promise<Db> {
  if ('databaseUrl' in cfg) return connectPostgres({ url: cfg.databaseUrl, poolSize: cfg.poolSize, applicationName: cfg.applicationName });
  return openPglite(cfg.dataDir);
}
