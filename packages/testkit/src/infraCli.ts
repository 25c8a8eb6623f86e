/**
 * `pnpm infra up|down|status`: a Kafka broker and a PostgreSQL server for development that outlive the
 * command, found or started the same way the tests get theirs. What `up` started is recorded in
 * <repo>/.infra/state.json so `down` and `status` in a later shell know what to stop or check.
 */
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { ChromiumUnavailableError, ensureChromium } from './chromium.js';
import { removeContainer } from './docker.js';
import { ensureKafka, kafkaLibs, waitForKafka, type KafkaHandle } from './kafka.js';
import { ensureKcat } from './kcat.js';
import { ensureOpenApiGenerator, OPENAPI_GENERATOR_VERSIONS } from './openapiGenerator.js';
import { ensurePromtool } from './promtool.js';
import { ensurePostgres, waitForPostgres, type PostgresHandle } from './postgres.js';
import { errorText, log, processMatches, REPO_ROOT, stopPid } from './proc.js';

// Overridable so a second pair (e.g. a check of this CLI) can run beside the one in use.
const INFRA_DIR = process.env.SHOPSTREAM_INFRA_DIR ? path.resolve(process.env.SHOPSTREAM_INFRA_DIR) : path.join(REPO_ROOT, '.infra');
const STATE_FILE = path.join(INFRA_DIR, 'state.json');
/** Fixed defaults so the README's instructions hold; other ports are used only when these are taken. */
const KAFKA_PORT = 9092;
const KAFKA_CONTROLLER_PORT = 9093;
const POSTGRES_PORT = 55432;
/** Development data goes to its own database rather than the server's shared `postgres` one. */
const DEV_DATABASE = 'shopstream';

interface Recorded {
  source: string;
  version: string;
  pid?: number;
  containerId?: string;
  runDir?: string;
  /** Text in the process's command line that proves a recorded pid is still ours. */
  marker?: string;
}

interface State {
  startedAt: string;
  kafka: Recorded & { brokers: string[] };
  postgres: Recorded & { url: string };
}

function readState(): State | undefined {
  if (!existsSync(STATE_FILE)) return undefined;
  try {
    return JSON.parse(readFileSync(STATE_FILE, 'utf8')) as State;
  } catch {
    return undefined;
  }
}

function printLines(state: State): void {
  process.stdout.write(`KAFKA_BROKERS=${state.kafka.brokers.join(',')}\nDATABASE_URL=${state.postgres.url}\n`);
}

function recordKafka(k: KafkaHandle): State['kafka'] {
  return {
    source: k.source,
    version: k.version,
    brokers: k.brokers,
    pid: k.pid,
    containerId: k.containerId,
    runDir: k.runDir,
    marker: k.runDir && path.join(k.runDir, 'server.properties'),
  };
}

function recordPostgres(p: PostgresHandle, url: string): State['postgres'] {
  return {
    source: p.source,
    version: p.version,
    url,
    pid: p.pid,
    containerId: p.containerId,
    runDir: p.runDir,
    marker: p.runDir && path.join(p.runDir, 'data'),
  };
}

async function ensureDevDatabase(adminUrl: string): Promise<string> {
  const client = new pg.Client({ connectionString: adminUrl });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [DEV_DATABASE]);
    if (!rowCount) await client.query(`CREATE DATABASE ${DEV_DATABASE}`);
  } finally {
    await client.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${DEV_DATABASE}`;
  return url.toString();
}

async function health(state: State): Promise<{ kafka?: string; postgres?: string }> {
  const problems: { kafka?: string; postgres?: string } = {};
  const k = state.kafka;
  if (k.pid && k.marker && !processMatches(k.pid, k.marker)) problems.kafka = `broker process ${k.pid} is gone`;
  else {
    try {
      await waitForKafka(k.brokers, { what: 'Kafka', timeoutMs: 3_000 });
    } catch (err) {
      problems.kafka = errorText(err);
    }
  }
  const p = state.postgres;
  if (p.pid && p.marker && !processMatches(p.pid, p.marker)) problems.postgres = `postgres process ${p.pid} is gone`;
  else {
    try {
      await waitForPostgres(p.url, { what: 'PostgreSQL', timeoutMs: 3_000 });
    } catch (err) {
      problems.postgres = errorText(err);
    }
  }
  return problems;
}

async function stopRecorded(what: string, r: Recorded, signal: NodeJS.Signals): Promise<void> {
  if (r.containerId) {
    await removeContainer(r.containerId);
    log(`removed ${what} container ${r.containerId.slice(0, 12)}`);
  } else if (r.pid && r.marker) {
    if (processMatches(r.pid, r.marker)) {
      await stopPid(r.pid, signal, 30_000);
      log(`stopped ${what} (pid ${r.pid})`);
    }
  } else {
    log(`left ${what} alone: \`infra up\` did not start it (${r.source})`);
  }
  if (r.runDir) await rm(r.runDir, { recursive: true, force: true });
}

async function stopAll(state: State): Promise<void> {
  await Promise.all([
    stopRecorded('Kafka', state.kafka, 'SIGTERM'),
    // SIGINT is PostgreSQL's "fast" shutdown: ends sessions, checkpoints, exits.
    stopRecorded('PostgreSQL', state.postgres, 'SIGINT'),
  ]);
}

async function up(): Promise<number> {
  const previous = readState();
  if (previous) {
    const problems = await health(previous);
    if (!problems.kafka && !problems.postgres) {
      printLines(previous);
      return 0;
    }
    log(`the pair from ${previous.startedAt} is not healthy (${Object.values(problems).join('; ')}); replacing it`);
    await stopAll(previous);
    await rm(STATE_FILE, { force: true });
  }
  // These variables are usually this command's own earlier output, possibly of a pair since stopped: `up`
  // always provides its own pair rather than trusting them.
  delete process.env.KAFKA_BROKERS;
  delete process.env.DATABASE_URL;
  // Containers must outlive this command; testcontainers' reaper would remove them when it exits.
  process.env.TESTCONTAINERS_RYUK_DISABLED = 'true';
  await mkdir(INFRA_DIR, { recursive: true });

  const kafka = await ensureKafka({
    detached: true,
    port: KAFKA_PORT,
    controllerPort: KAFKA_CONTROLLER_PORT,
    runDir: path.join(INFRA_DIR, 'kafka'),
    profile: 'dev',
  });
  let state: State;
  try {
    const postgres = await ensurePostgres({
      detached: true,
      port: POSTGRES_PORT,
      runDir: path.join(INFRA_DIR, 'postgres'),
      profile: 'dev',
    });
    const url = await ensureDevDatabase(postgres.url);
    state = { startedAt: new Date().toISOString(), kafka: recordKafka(kafka), postgres: recordPostgres(postgres, url) };
  } catch (err) {
    await kafka.stop();
    throw err;
  }
  await writeFile(STATE_FILE, JSON.stringify(state, null, 2) + '\n');
  log(`Kafka ${kafka.version} (${describe(state.kafka)}), PostgreSQL ${state.postgres.version.split(' ')[0]} (${describe(state.postgres)})`);
  printLines(state);
  return 0;
}

function describe(r: Recorded): string {
  if (r.containerId) return `docker container ${r.containerId.slice(0, 12)}`;
  if (r.pid) {
    const dir = r.runDir ?? '';
    const shown = dir.startsWith(REPO_ROOT) ? path.relative(REPO_ROOT, dir) : dir;
    return `started by infra up (${r.source === 'local' ? 'local program' : r.source}), pid ${r.pid}, files in ${shown}`;
  }
  return r.source === 'existing' ? 'the server already running on this machine' : r.source;
}

async function down(): Promise<number> {
  const state = readState();
  if (!state) {
    log(`nothing to stop: no ${STATE_FILE}`);
    return 0;
  }
  await stopAll(state);
  await rm(STATE_FILE, { force: true });
  return 0;
}

async function status(): Promise<number> {
  const state = readState();
  if (!state) {
    process.stdout.write(`down: nothing was started by \`pnpm infra up\` (no ${STATE_FILE})\n`);
    return 3;
  }
  const problems = await health(state);
  const line = (name: string, r: Recorded, problem?: string) =>
    `${name}: ${problem ? `NOT OK (${problem})` : 'running'}: ${r.version.split(' ')[0]}, ${describe(r)}\n`;
  process.stdout.write(line('kafka', state.kafka, problems.kafka));
  process.stdout.write(line('postgres', state.postgres, problems.postgres));
  printLines(state);
  return problems.kafka || problems.postgres ? 1 : 0;
}

/**
 * Fetches, once into the cache, every program a spec would otherwise fetch the first time it runs: a step of
 * its own in .ci/run, so `pnpm test` downloads no toolchain and its time is the suite's. Each line says what
 * it took; a tool that cannot be had here (chromium without root) is named and its spec skips or fails as before.
 */
async function tools(): Promise<number> {
  const steps: [string, () => unknown][] = [
    ['Kafka jars (a local broker; the partitioner spec runs its Java)', () => kafkaLibs()],
    ['promtool (metrics and alert-rule specs)', () => ensurePromtool()],
    ['kcat (partitioner spec)', () => ensureKcat()],
    ...OPENAPI_GENERATOR_VERSIONS.map((v): [string, () => unknown] => [`openapi-generator ${v} (generated clients spec)`, () => ensureOpenApiGenerator(v)]),
    ['chromium (status page spec)', () => ensureChromium()],
  ];
  let failed = 0;
  for (const [what, fetch] of steps) {
    const started = Date.now();
    try {
      await fetch();
      process.stdout.write(`${what}: ready in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
    } catch (err) {
      const skipped = err instanceof ChromiumUnavailableError;
      if (!skipped) failed++;
      process.stdout.write(`${what}: ${skipped ? 'not available (its spec skips)' : 'FAILED'}: ${errorText(err)}\n`);
    }
  }
  return failed > 0 ? 1 : 0;
}

const USAGE = `usage: pnpm infra <up|down|status|tools>
  up      find or start Kafka and PostgreSQL in the background; prints KAFKA_BROKERS=... and DATABASE_URL=...
          (again, unchanged, when they are already up). eval "$(pnpm -s infra up)" exports them.
  down    stop what \`up\` started
  status  whether they answer; exit code 0 when both do, 1 when one does not, 3 when nothing is up
  tools   fetch (once, into ~/.cache/shopstream) the programs some specs run: Kafka's jars, promtool, kcat,
          openapi-generator, chromium; what each took. .ci/run runs it before \`pnpm test\``;

async function main(argv: string[]): Promise<number> {
  switch (argv[0]) {
    case 'up':
      return up();
    case 'down':
      return down();
    case 'status':
      return status();
    case 'tools':
      return tools();
    case undefined:
    case '-h':
    case '--help':
    case 'help':
      process.stdout.write(`${USAGE}\n`);
      return argv[0] === undefined ? 2 : 0;
    default:
      process.stderr.write(`unknown command ${argv[0]}\n${USAGE}\n`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`infra ${process.argv[2]}: ${errorText(err)}\n`);
    process.exit(1);
  },
);
