import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { openEmbeddedPostgres, runningServer, type Db } from '@shopstream/db';
import { pgLogOnServerConformance } from './pgLogOnServer.js';

// The embedded mode's engine: PostgreSQL from the npm registry's binaries, started in a DATA_DIR of its own.
let dir: string;
let owner: Db;
pgLogOnServerConformance(
  'Postgres log on the embedded PostgreSQL',
  async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'shopstream-embedded-bus-'));
    chmodSync(dir, 0o755); // as root, the server runs as another OS user, who must be able to enter it
    owner = await openEmbeddedPostgres(path.join(dir, 'data'), { poolSize: 1 });
    return `postgres://postgres@127.0.0.1:${runningServer(path.join(dir, 'data'))!.port}/shopstream`;
  },
  async () => {
    await owner?.close();
    rmSync(dir, { recursive: true, force: true });
  },
);
