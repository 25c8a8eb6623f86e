import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openEmbeddedPostgres, runningServer, sql, type Db } from '@shopstream/db';
import type { Context } from './types.js';

export interface OwnPostgres {
  /** The owner's connection (poolSize connections); replaced by `start` after a `stop`. */
  db: Db;
  dataDir: string;
  port: number;
  version: string;
  /** The URL the services are given (DATABASE_URL). */
  url: string;
  /** `pg_ctl stop`: the database is gone until `start`. */
  stop(): Promise<void>;
  /** Started again on its data, at the same port. */
  start(): Promise<void>;
}

/**
 * A scenario's own PostgreSQL: the embedded mode's engine in a temporary directory, never the server the tests
 * or `pnpm infra up` share (a scenario may stop it). Stopped and removed when the scenario ends.
 */
export async function ownPostgres(ctx: Context, opts: { poolSize?: number } = {}): Promise<OwnPostgres> {
  const dir = mkdtempSync(path.join(os.tmpdir(), `shopstream-faults-${ctx.scenario}-`));
  chmodSync(dir, 0o755); // as root, the cluster belongs to the postgres OS user, who must enter it
  ctx.defer(() => rmSync(dir, { recursive: true, force: true }));
  const dataDir = path.join(dir, 'data');
  const poolSize = opts.poolSize ?? 1;
  let open: Db | undefined = await openEmbeddedPostgres(dataDir, { poolSize });
  ctx.defer(async () => void (await open?.close()));
  const port = runningServer(dataDir)!.port;
  const version = String((await open.query(sql`SHOW server_version`))[0].server_version);
  ctx.log(`PostgreSQL ${version} on ${port}`);
  const pg: OwnPostgres = {
    db: open,
    dataDir,
    port,
    version,
    url: `postgres://postgres@127.0.0.1:${port}/shopstream`,
    async stop() {
      await open?.close();
      open = undefined;
    },
    async start() {
      open = await openEmbeddedPostgres(dataDir, { poolSize, port });
      pg.db = open;
    },
  };
  return pg;
}
