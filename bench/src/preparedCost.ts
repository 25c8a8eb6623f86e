/**
 * What a statement costs the PostgreSQL server unnamed and as a prepared statement (packages/db
 * preparedStatements.ts, DATABASE_PREPARED_STATEMENTS), through connectPostgres as the services run it:
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/shopstream npx tsx --conditions=@shopstream/source bench/src/preparedCost.ts [runs] [rounds]
 *
 * The statement is a consumer's checkpoint move (@shopstream/projections' moveCheckpoint, the runner's own), run `runs`
 * times in one transaction on a pool of one connection, each way in turn, `rounds` times. The server's CPU is
 * its backend process's, read from /proc: the server must run on this machine (Linux). The database is
 * migrated first; the checkpoint rows it writes are under a group of its own and deleted at the end.
 */
import { readFileSync } from 'node:fs';
import { connectPostgres, migrate, queryRow, sql, type Db } from '@shopstream/db';
import { moveCheckpoint } from '@shopstream/projections';

const RUNS = Number(process.argv[2] ?? 4_000);
const ROUNDS = Number(process.argv[3] ?? 3);
const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is not set');
const GROUP = `bench-prepared-cost-${process.pid}`;

/** CPU time (user + system) of a process, in ms, from /proc/<pid>/stat (clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

async function measure(prepared: boolean): Promise<{ serverUs: number; clientUs: number; wallUs: number }> {
  const db: Db = connectPostgres({ url: url!, poolSize: 1, applicationName: 'bench-prepared-cost', preparedStatements: prepared });
  try {
    return await db.tx(async (tx) => {
      const pid = (await queryRow(tx, sql`SELECT pg_backend_pid() AS pid`, (r) => Number(r.pid)))!;
      const server0 = cpuMs(pid);
      const client0 = process.cpuUsage();
      const wall0 = performance.now();
      for (let i = 0; i < RUNS; i++) {
        await moveCheckpoint(tx, GROUP, { topic: 'events', partition: i % 12 }, BigInt(i));
      }
      const wall = performance.now() - wall0;
      const client = process.cpuUsage(client0);
      return {
        serverUs: ((cpuMs(pid) - server0) * 1000) / RUNS,
        clientUs: (client.user + client.system) / RUNS,
        wallUs: (wall * 1000) / RUNS,
      };
    });
  } finally {
    await db.close();
  }
}

async function main(): Promise<void> {
  const setup = connectPostgres({ url: url!, poolSize: 1 });
  await migrate(setup);
  const rows: string[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const prepared of [false, true]) {
        const m = await measure(prepared);
        rows.push(
          `| ${round + 1} | ${prepared ? 'prepared' : 'unnamed'} | ${m.serverUs.toFixed(0)} µs | ${m.clientUs.toFixed(0)} µs | ${m.wallUs.toFixed(0)} µs |`,
        );
      }
    }
  } finally {
    await setup.query(sql`DELETE FROM projection_offsets WHERE group_id = ${GROUP}`);
    await setup.close();
  }
  console.log(`A consumer's checkpoint statement, ${RUNS} runs in one transaction per row (server CPU: its backend process's)\n`);
  console.log('| round | statement | server CPU per run | client CPU per run | wall time per run |');
  console.log('|---|---|---|---|---|');
  for (const r of rows) console.log(r);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
