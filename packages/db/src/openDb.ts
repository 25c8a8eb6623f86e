import { existsSync } from 'node:fs';
import path from 'node:path';
import { connectPostgres, type Db } from './db.js';
import { openPglite } from './openPglite.js';
import { clusterDir, embeddedPostgresBinaries, openEmbeddedPostgres, unreachableAsRoot } from './embeddedPostgres.js';

export type EmbeddedEngine = 'auto' | 'postgres' | 'pglite';

export type DbConfig =
  | { databaseUrl: string; poolSize?: number; applicationName?: string; preparedStatements?: boolean }
  | {
      dataDir: string;
      /** Which embedded database: 'auto' keeps the one DATA_DIR was made with, else PostgreSQL where its binaries exist. */
      engine?: EmbeddedEngine;
      /** Connect to the embedded server of a running `pnpm start` instead of refusing (CLI commands). */
      attach?: boolean;
      poolSize?: number;
      applicationName?: string;
      preparedStatements?: boolean;
      onEngine?: (info: { engine: 'postgres' | 'pglite'; why: string; how?: string; ms?: number }) => void;
    };

/** The engine a DATA_DIR uses: the one it was made with, else PostgreSQL where the npm registry has binaries. */
export async function embeddedEngine(dataDir: string, wanted: EmbeddedEngine = 'auto'): Promise<{ engine: 'postgres' | 'pglite'; why: string }> {
  if (wanted === 'pglite') return { engine: 'pglite', why: 'EMBEDDED_DB=pglite' };
  const bins = await embeddedPostgresBinaries();
  if (wanted === 'postgres') {
    if (!bins) throw new Error(`EMBEDDED_DB=postgres, but the npm registry has no PostgreSQL binaries for ${process.platform}-${process.arch} here.`);
    return { engine: 'postgres', why: 'EMBEDDED_DB=postgres' };
  }
  if (existsSync(path.join(clusterDir(dataDir), 'PG_VERSION'))) return { engine: 'postgres', why: `${clusterDir(dataDir)} holds a PostgreSQL cluster` };
  // A DATA_DIR made by PGlite (before PostgreSQL became the default) keeps its data where it is.
  if (existsSync(path.join(dataDir, 'pg', 'PG_VERSION'))) return { engine: 'pglite', why: `${path.join(dataDir, 'pg')} holds a PGlite database` };
  if (!bins) return { engine: 'pglite', why: `no PostgreSQL binaries for ${process.platform}-${process.arch}` };
  const unreachable = unreachableAsRoot(dataDir);
  if (unreachable) {
    return {
      engine: 'pglite',
      why: `${unreachable}; PGlite serves instead, much slower: set DATA_DIR to a directory that user can enter, or run as another user`,
    };
  }
  return { engine: 'postgres', why: 'the default' };
}

/** The server when a URL is given, else the embedded database in dataDir (PostgreSQL, or PGlite). */
export async function openDb(cfg: DbConfig): Promise<Db> {
  if ('databaseUrl' in cfg)
    return connectPostgres({
      url: cfg.databaseUrl,
      poolSize: cfg.poolSize,
      applicationName: cfg.applicationName,
      preparedStatements: cfg.preparedStatements,
    });
  const { engine, why } = await embeddedEngine(cfg.dataDir, cfg.engine);
  if (engine === 'pglite') {
    cfg.onEngine?.({ engine, why });
    return openPglite(cfg.dataDir);
  }
  return openEmbeddedPostgres(cfg.dataDir, {
    attach: cfg.attach,
    poolSize: cfg.poolSize,
    applicationName: cfg.applicationName,
    preparedStatements: cfg.preparedStatements,
    onReady: ({ how, ms }) => cfg.onEngine?.({ engine, why, how, ms }),
  });
}
