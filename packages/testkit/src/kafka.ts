import type { ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ContainerRuntimeClient } from 'testcontainers';
import { Kafka, logLevel } from 'kafkajs';
import { dockerEngine } from './docker.js';
import { cacheRoot, errorText, findExecutable, freePort, log, once, pollUntil, runCommand, startServer, stopChild, sweepRuns } from './proc.js';
import { InfraUnavailableError } from './unavailable.js';
import { KAFKA_IMAGE, KAFKA_VERSION } from './versions.js';

export type KafkaSource = 'env' | 'docker' | 'local';

export interface KafkaHandle {
  brokers: string[];
  version: string;
  source: KafkaSource;
  /** Set for a local broker: lets another process (`pnpm infra down`) stop it. */
  pid?: number;
  containerId?: string;
  runDir?: string;
  /** Set for a local broker: with runDir and the broker's port, what a restart on its data needs (`reuseData`). */
  controllerPort?: number;
  stop(): Promise<void>;
}

export interface KafkaOptions {
  /** Leave the broker running after this process exits (`pnpm infra up`). */
  detached?: boolean;
  /** PLAINTEXT port to use when it is free; otherwise any free port. */
  port?: number;
  controllerPort?: number;
  /** Where the local broker keeps data and its log; a fresh dir under the cache by default. */
  runDir?: string;
  /**
   * Start on the data a broker of this `runDir` left behind (one killed on purpose, `pnpm faults
   * broker-outage`), instead of formatting fresh storage: its topics, records and committed offsets are
   * still there. `port` and `controllerPort` must be the ones it had (clients were told that address), and
   * are taken as given: no other port is tried.
   */
  reuseData?: boolean;
  /**
   * 'test' (default) stops the JIT at C1 for a faster JVM start and kills the broker outright on stop,
   * its data being thrown away; 'dev' keeps the full JIT, which benchmarks need, and shuts down cleanly.
   */
  profile?: 'test' | 'dev';
}

const POM = fileURLToPath(new URL('../kafka/pom.xml', import.meta.url));
const KAFKA_HOME = () => path.join(cacheRoot(), `kafka-${KAFKA_VERSION}`);
const RUNS = () => path.join(cacheRoot(), 'runs');

/**
 * Broker settings shared by the local and the Docker broker: one node, so every internal topic has one
 * replica; no auto-creation, because the services create the topics they own; no rebalance delay, so a
 * consumer group forms as soon as its first member joins; one partition for the internal topics, which
 * makes the first group join and the first idempotent producer fast (50 partitions take seconds).
 */
const BROKER_SETTINGS: Record<string, string> = {
  'auto.create.topics.enable': 'false',
  'num.partitions': '1',
  'default.replication.factor': '1',
  'min.insync.replicas': '1',
  'offsets.topic.replication.factor': '1',
  'offsets.topic.num.partitions': '1',
  'transaction.state.log.replication.factor': '1',
  'transaction.state.log.min.isr': '1',
  'transaction.state.log.num.partitions': '1',
  'share.coordinator.state.topic.replication.factor': '1',
  'share.coordinator.state.topic.min.isr': '1',
  'group.initial.rebalance.delay.ms': '0',
  'log.segment.bytes': String(16 * 1024 * 1024),
  // No deletion by age by default: the source topics (events, conversations) are what projections are rebuilt
  // from, and a topic created without its own retention (by hand, or by an older Shopstream) must not quietly
  // lose records after a day. Shopstream's topics carry their own retention (packages/bus topicRoles.ts):
  // kept forever for source and dead-letter topics, DERIVED_TOPIC_RETENTION_MS for derived ones.
  'log.retention.ms': '-1',
  // The default 128 MiB compaction buffer would take a quarter of the 512 MiB heap for nothing.
  'log.cleaner.dedupe.buffer.size': String(8 * 1024 * 1024),
  'num.network.threads': '2',
  'num.io.threads': '4',
  'num.recovery.threads.per.data.dir': '1',
};

/**
 * A Kafka broker for tests or development: KAFKA_BROKERS, else a container when a Docker engine answers,
 * else a local broker run with the machine's java.
 */
export async function ensureKafka(options: KafkaOptions = {}): Promise<KafkaHandle> {
  const fromEnv = process.env.KAFKA_BROKERS?.trim();
  if (fromEnv) {
    const brokers = fromEnv
      .split(',')
      .map((b) => b.trim())
      .filter(Boolean);
    // It was asked for explicitly: a broker that does not answer is an error, not a reason to start another.
    await waitForKafka(brokers, { what: `Kafka at KAFKA_BROKERS=${fromEnv}`, timeoutMs: 30_000 });
    return { brokers, version: 'unknown (from KAFKA_BROKERS)', source: 'env', stop: async () => {} };
  }
  const docker = await dockerEngine();
  if (docker.ok) return startKafkaContainer(docker.client, options);
  const missing = localKafkaMissing();
  if (!missing) return startLocalKafka(options);
  throw new InfraUnavailableError(
    'Kafka',
    { env: 'KAFKA_BROKERS is not set', docker: docker.reason, local: missing },
    `set KAFKA_BROKERS=host:port of a running broker; or start a Docker engine; or install a JDK 17+ ` +
      `(java) and Maven (mvn), so testkit can run Kafka ${KAFKA_VERSION} from Maven Central.`,
  );
}

/** Polls until a broker answers describeCluster and listTopics, i.e. it is registered and serving. */
export async function waitForKafka(brokers: string[], opts: { what: string; timeoutMs: number; abort?: () => string | undefined }): Promise<void> {
  const kafka = new Kafka({
    clientId: 'testkit-probe',
    brokers,
    logLevel: logLevel.NOTHING,
    connectionTimeout: 1_000,
    requestTimeout: 5_000,
    retry: { retries: 0 },
  });
  await pollUntil(
    opts.what,
    async () => {
      const admin = kafka.admin({ retry: { retries: 0 } });
      try {
        await admin.connect();
        const cluster = await admin.describeCluster();
        if (cluster.brokers.length === 0) throw new Error('no broker registered yet');
        await admin.listTopics();
      } finally {
        await admin.disconnect().catch(() => undefined);
      }
    },
    { timeoutMs: opts.timeoutMs, intervalMs: 100, abort: opts.abort },
  );
}

/**
 * Makes the broker create its group and transaction coordinators' topics now. Otherwise the first consumer
 * group and the first idempotent producer of a run meet "coordinator is loading" errors, which kafkajs
 * retries, but with crash-and-restart logs and a 300 ms backoff inside some unlucky test.
 */
async function warmUpCoordinators(brokers: string[], timeoutMs: number): Promise<void> {
  // kafkajs' default first backoff is 300 ms; the coordinators load in well under that, so ask often.
  const kafka = new Kafka({
    clientId: 'testkit-warmup',
    brokers,
    logLevel: logLevel.NOTHING,
    retry: { initialRetryTime: 25, maxRetryTime: 200, retries: 100 },
  });
  const admin = kafka.admin();
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await pollUntil(
    'Kafka group and transaction coordinators',
    async () => {
      await admin.connect();
      await Promise.all([
        admin.describeGroups(['testkit-warmup']),
        // Connecting an idempotent producer asks the transaction coordinator for a producer id.
        producer.connect(),
      ]);
    },
    { timeoutMs, intervalMs: 100 },
  ).finally(() => Promise.allSettled([admin.disconnect(), producer.disconnect()]));
}

function findJava(): string | undefined {
  const fromHome = process.env.JAVA_HOME && path.join(process.env.JAVA_HOME, 'bin', 'java');
  if (fromHome && existsSync(fromHome)) return fromHome;
  return findExecutable('java');
}

function localKafkaMissing(): string | undefined {
  if (!findJava()) return 'no java in JAVA_HOME or on PATH';
  if (!existsSync(path.join(KAFKA_HOME(), 'libs')) && !findExecutable('mvn')) {
    return `Kafka ${KAFKA_VERSION} jars are not cached in ${KAFKA_HOME()} and there is no mvn on PATH to fetch them`;
  }
  return undefined;
}

/**
 * The broker's jars, fetched from Maven Central the first time into the cache and reused after that.
 * Fetched into a temporary dir and renamed, so concurrent runs never see half a download.
 */
export async function kafkaLibs(): Promise<string> {
  const home = KAFKA_HOME();
  const libs = path.join(home, 'libs');
  if (existsSync(libs)) return libs;
  const mvn = findExecutable('mvn');
  if (!mvn) throw new Error(`Kafka ${KAFKA_VERSION} jars are not in ${libs} and there is no mvn to fetch them`);
  await mkdir(home, { recursive: true });
  const tmp = await mkdtemp(path.join(home, 'libs.tmp-'));
  log(`fetching Kafka ${KAFKA_VERSION} jars from Maven Central (once) into ${libs}`);
  const started = Date.now();
  const { code, output } = await runCommand(
    mvn,
    ['-q', '-B', '-f', POM, `-Dkafka.version=${KAFKA_VERSION}`, 'dependency:copy-dependencies', '-DincludeScope=runtime', `-DoutputDirectory=${tmp}`],
    { timeoutMs: 15 * 60_000 },
  );
  if (code !== 0) {
    await rm(tmp, { recursive: true, force: true });
    throw new Error(`mvn could not fetch Kafka ${KAFKA_VERSION} (exit ${code}):\n${output.trim()}`);
  }
  try {
    await rename(tmp, libs);
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    if (!existsSync(libs)) throw err;
    // Another process finished the same download first; its copy is as good as ours.
  }
  log(`fetched Kafka jars in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return libs;
}

/** The class path of the Kafka jars testkit runs brokers from (fetched once), for a Java program of a test's own. */
export async function kafkaClasspath(): Promise<string> {
  return classpath(await kafkaLibs());
}

/** An explicit, sorted classpath: the CDS archive is only valid for the exact same classpath. */
function classpath(libs: string): string {
  return readdirSync(libs)
    .filter((f) => f.endsWith('.jar'))
    .sort()
    .map((f) => path.join(libs, f))
    .join(path.delimiter);
}

function jvmFlags(profile: 'test' | 'dev', extra: string[]): string[] {
  return [
    '-Xmx512m',
    // test: one GC thread and no G1 region setup, which starts faster and is plenty for one test broker on 2 cores.
    // dev (`pnpm infra up`, bench, faults): Kafka's own start script's collector (kafka-run-class.sh), as brokers run.
    // Serial collection paused the broker 70-100 ms every 20-30 s under 5.5 MB produce requests (the large-bodies
    // bench), stalling every producer's sends meanwhile.
    ...(profile === 'test'
      ? ['-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1']
      : ['-XX:+UseG1GC', '-XX:MaxGCPauseMillis=20', '-XX:InitiatingHeapOccupancyPercent=35']),
    '-Xshare:auto',
    '-XX:-UsePerfData',
    '-XX:+ExitOnOutOfMemoryError',
    '-Djava.awt.headless=true',
    ...extra,
  ];
}

/** Kafka's own cluster id format: 16 random bytes, base64url, never starting with '-' (CLI parsing). */
function clusterId(): string {
  for (;;) {
    const id = randomBytes(16).toString('base64url');
    if (!id.startsWith('-')) return id;
  }
}

/**
 * Storage formatted by Kafka's StorageTool once per Kafka version, kept in the cache. StorageTool writes
 * two files, and the cluster id and directory id live only in meta.properties, so each run copies the
 * template and stamps fresh random ids there: the same result as formatting, without a JVM start (~0.8 s)
 * on every run.
 */
async function storageTemplate(java: string, cp: string): Promise<string> {
  const template = path.join(KAFKA_HOME(), 'storage-template');
  if (existsSync(path.join(template, 'meta.properties'))) return template;
  const tmp = await mkdtemp(path.join(KAFKA_HOME(), 'storage-template.tmp-'));
  try {
    const data = path.join(tmp, 'data');
    const propsFile = path.join(tmp, 'server.properties');
    // Ports are not used by a format; any valid listener layout will do.
    await writeFile(propsFile, properties(brokerProperties(data, 1, 2)) + '\n');
    const format = await runCommand(java, [...jvmFlags('test', []), '-cp', cp, 'kafka.tools.StorageTool', 'format', '-t', clusterId(), '-c', propsFile], {
      cwd: tmp,
      timeoutMs: 60_000,
    });
    if (format.code !== 0) {
      throw new Error(`kafka StorageTool format failed (exit ${format.code}):\n${format.output.trim()}`);
    }
    try {
      await rename(data, template);
    } catch (err) {
      if (!existsSync(path.join(template, 'meta.properties'))) throw err;
      // Another process made the same template first.
    }
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
  return template;
}

/** StorageTool format of propsFile's log.dirs with SCRAM users (`kafka-storage format --add-scram`): a JVM start (~1 s). */
async function formatStorage(java: string, cp: string, cwd: string, propsFile: string, scramUsers: string[]): Promise<void> {
  const scram = scramUsers.flatMap((u) => ['--add-scram', u]);
  const format = await runCommand(
    java,
    [...jvmFlags('test', []), '-cp', cp, 'kafka.tools.StorageTool', 'format', '-t', clusterId(), '-c', propsFile, ...scram],
    {
      cwd,
      timeoutMs: 60_000,
    },
  );
  if (format.code !== 0) throw new Error(`kafka StorageTool format --add-scram failed (exit ${format.code}):\n${format.output.trim()}`);
}

async function stampStorage(template: string, dataDir: string): Promise<void> {
  await mkdir(dataDir, { recursive: true });
  for (const file of readdirSync(template)) {
    if (file !== 'meta.properties') await copyFile(path.join(template, file), path.join(dataDir, file));
  }
  const meta = readFileSync(path.join(template, 'meta.properties'), 'utf8')
    .split('\n')
    .filter((line) => !/^(cluster\.id|directory\.id)=/.test(line));
  meta.push(`cluster.id=${clusterId()}`, `directory.id=${clusterId()}`);
  await writeFile(path.join(dataDir, 'meta.properties'), meta.join('\n') + '\n');
}

function brokerProperties(dataDir: string, port: number, controllerPort: number): Record<string, string> {
  return {
    'process.roles': 'broker,controller',
    'node.id': '1',
    // A static one-voter quorum needs no --standalone at format time and reads the same on 3.9 and 4.x.
    'controller.quorum.voters': `1@127.0.0.1:${controllerPort}`,
    listeners: `PLAINTEXT://127.0.0.1:${port},CONTROLLER://127.0.0.1:${controllerPort}`,
    'advertised.listeners': `PLAINTEXT://127.0.0.1:${port}`,
    'listener.security.protocol.map': 'PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT',
    'inter.broker.listener.name': 'PLAINTEXT',
    'controller.listener.names': 'CONTROLLER',
    'log.dirs': dataDir,
    ...BROKER_SETTINGS,
  };
}

function properties(values: Record<string, string>): string {
  return Object.entries(values)
    .map(([k, v]) => `${k}=${v}`)
    .join('\n');
}

const LOG4J2 = `status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = warn
`;

interface Launched {
  child: ChildProcess;
  port: number;
  controllerPort: number;
  logFile: string;
}

async function launchBroker(
  java: string,
  cp: string,
  opts: {
    runDir: string;
    port: number;
    controllerPort: number;
    profile: 'test' | 'dev';
    detached: boolean;
    jvmExtra: string[];
    template: string;
    reuseData?: boolean;
    /** Settings over brokerProperties' (more listeners, TLS, SASL: secureKafka.ts). */
    settings?: Record<string, string>;
    /** StorageTool format's --add-scram values (SCRAM users made at format time): formats afresh instead of the template. */
    scramUsers?: string[];
  },
): Promise<Launched> {
  const { runDir, port, controllerPort } = opts;
  const dataDir = path.join(runDir, 'data');
  const reuse = opts.reuseData === true && existsSync(path.join(dataDir, 'meta.properties'));
  if (opts.reuseData && !reuse) throw new Error(`reuseData: no broker data in ${dataDir}`);
  if (!reuse) await rm(dataDir, { recursive: true, force: true });
  const propsFile = path.join(runDir, 'server.properties');
  const log4jFile = path.join(runDir, 'log4j2.properties');
  const logFile = path.join(runDir, 'broker.log');
  await writeFile(propsFile, properties({ ...brokerProperties(dataDir, port, controllerPort), ...opts.settings }) + '\n');
  await writeFile(log4jFile, LOG4J2);
  const base = jvmFlags(opts.profile, [`-Dlog4j2.configurationFile=${log4jFile}`]);
  if (!reuse && opts.scramUsers) await formatStorage(java, cp, runDir, propsFile, opts.scramUsers);
  else if (!reuse) await stampStorage(opts.template, dataDir);

  const { child } = await startServer({
    what: 'the broker',
    command: java,
    args: [...base, ...opts.jvmExtra, '-cp', cp, 'kafka.Kafka', propsFile],
    runDir,
    detached: opts.detached,
    logFile,
    // The properties path is in the broker's command line and names this run alone.
    marker: propsFile,
    ready: async (abort) => {
      await waitForKafka([`127.0.0.1:${port}`], { what: `local Kafka ${KAFKA_VERSION} on 127.0.0.1:${port}`, timeoutMs: 90_000, abort });
      await warmUpCoordinators([`127.0.0.1:${port}`], 30_000);
    },
    failSignal: 'SIGKILL',
    tailLines: 60,
  });
  return { child, port, controllerPort, logFile };
}

/**
 * A class-data-sharing archive of the classes a broker loads at start, made once per (java, Kafka
 * version) by starting and cleanly stopping a broker. Later JVMs map it instead of parsing ~3,000 classes
 * from 45 jars, which about halves the broker's start (2.0 s to 1.1 s here). Only a speed-up: any failure
 * leaves it out.
 */
async function cdsArchive(java: string, cp: string, template: string): Promise<string | undefined> {
  if (process.env.SHOPSTREAM_TESTKIT_CDS === '0') return undefined;
  const real = realpathSync(java);
  const st = statSync(real);
  const key = createHash('sha1').update(`${real}:${st.size}:${st.mtimeMs}:${cp}`).digest('hex').slice(0, 12);
  const archive = path.join(KAFKA_HOME(), `cds-${key}.jsa`);
  if (existsSync(archive)) return archive;

  const started = Date.now();
  const runDir = await mkdtemp(path.join(RUNS(), 'cds-'));
  const tmpArchive = path.join(runDir, 'classes.jsa');
  try {
    const ports = await brokerPorts();
    const { child } = await launchBroker(java, cp, {
      runDir,
      ...ports,
      profile: 'test',
      detached: false,
      jvmExtra: [`-XX:ArchiveClassesAtExit=${tmpArchive}`],
      template,
    });
    // The archive is written when the JVM exits normally, so this one stop is a clean SIGTERM.
    await stopChild(child, 'SIGTERM', 60_000);
    if (existsSync(tmpArchive)) {
      await rename(tmpArchive, archive);
      log(`made a class-data archive for faster broker starts in ${((Date.now() - started) / 1000).toFixed(1)} s`);
      return archive;
    }
  } catch (err) {
    log(`no class-data archive (brokers start a little slower): ${errorText(err)}`);
  } finally {
    await rm(runDir, { recursive: true, force: true });
  }
  return undefined;
}

async function brokerPorts(preferred?: number, preferredController?: number) {
  const port = await freePort(preferred);
  const controllerPort = await freePort(preferredController, [port]);
  return { port, controllerPort };
}

/**
 * What every local broker JVM starts from: the jars' class path, the formatted storage template, the class-data
 * archive (when the JVM could make one); the runs directory swept of dead brokers' leftovers.
 */
async function prepareBrokerJvm(java: string): Promise<{ cp: string; template: string; jvmExtra: string[] }> {
  const cp = classpath(await kafkaLibs());
  await mkdir(RUNS(), { recursive: true });
  sweepRuns(RUNS());
  const template = await storageTemplate(java, cp);
  const cds = await cdsArchive(java, cp, template);
  return { cp, template, jvmExtra: cds ? [`-XX:SharedArchiveFile=${cds}`] : [] };
}

/** A single-node KRaft broker (broker and controller in one JVM) from the Maven Central jars. */
export async function startLocalKafka(options: KafkaOptions = {}): Promise<KafkaHandle> {
  const java = findJava();
  if (!java) throw new Error('no java in JAVA_HOME or on PATH');
  const profile = options.profile ?? 'test';
  const { cp, template, jvmExtra } = await prepareBrokerJvm(java);

  const runDir = options.runDir ?? (await mkdtemp(path.join(RUNS(), 'kafka-')));
  await mkdir(runDir, { recursive: true });
  const detached = options.detached ?? false;
  let launched: Launched | undefined;
  // Free ports are picked before the JVM binds them; another process can take one in between, so a
  // bind failure gets one more try on new ports.
  if (options.reuseData) {
    if (options.port === undefined || options.controllerPort === undefined) throw new Error('reuseData needs the port and controllerPort the broker had');
    launched = await launchBroker(java, cp, {
      runDir,
      port: options.port,
      controllerPort: options.controllerPort,
      profile,
      detached,
      jvmExtra,
      template,
      reuseData: true,
    });
  }
  for (let attempt = 1; !launched; attempt++) {
    const ports = await brokerPorts(options.port, options.controllerPort);
    try {
      launched = await launchBroker(java, cp, { runDir, ...ports, profile, detached, jvmExtra, template });
    } catch (err) {
      if (attempt >= 2 || !/Address already in use/.test(errorText(err))) {
        if (!options.runDir) await rm(path.join(runDir, 'data'), { recursive: true, force: true });
        throw err;
      }
    }
  }
  const { child, port, controllerPort } = launched;
  return {
    brokers: [`127.0.0.1:${port}`],
    version: KAFKA_VERSION,
    source: 'local',
    pid: child.pid,
    runDir,
    controllerPort,
    stop: once(async () => {
      // Test data goes away with the run dir, so a clean controlled shutdown (~2 s) would buy nothing.
      await stopChild(child, profile === 'test' ? 'SIGKILL' : 'SIGTERM', 20_000);
      await rm(runDir, { recursive: true, force: true });
    }),
  };
}

/** What startLocalKafkaWith makes: a broker of this machine's java with settings of the caller's. */
export interface CustomKafkaOptions {
  /** Settings over the usual ones, given the PLAINTEXT port (the readiness check uses it) and the controller's. */
  settings: (ports: { port: number; controllerPort: number }) => Record<string, string>;
  /** Ports the broker must not take (the caller's own listeners). */
  avoidPorts: number[];
  /** SCRAM users made when the storage is formatted (StorageTool's --add-scram). */
  scramUsers?: string[];
}

/**
 * A single-node KRaft broker like startLocalKafka's, with extra settings and SCRAM users (secureKafka.ts's SASL_SSL
 * listener beside the PLAINTEXT one, which is only used to tell when it is ready). Always the test profile.
 */
export async function startLocalKafkaWith(o: CustomKafkaOptions): Promise<{ plaintextPort: number; logFile: string; stop(): Promise<void> }> {
  const java = findJava();
  if (!java) throw new Error('no java in JAVA_HOME or on PATH');
  const { cp, template, jvmExtra } = await prepareBrokerJvm(java);
  const runDir = await mkdtemp(path.join(RUNS(), 'kafka-custom-'));
  const port = await freePort(undefined, o.avoidPorts);
  const controllerPort = await freePort(undefined, [...o.avoidPorts, port]);
  const { child, logFile } = await launchBroker(java, cp, {
    runDir,
    port,
    controllerPort,
    profile: 'test',
    detached: false,
    jvmExtra,
    template,
    settings: o.settings({ port, controllerPort }),
    scramUsers: o.scramUsers,
  }).catch(async (e: unknown) => {
    await rm(runDir, { recursive: true, force: true });
    throw e;
  });
  return {
    plaintextPort: port,
    logFile,
    stop: once(async () => {
      await stopChild(child, 'SIGKILL', 20_000);
      await rm(runDir, { recursive: true, force: true });
    }),
  };
}

/** The same broker as an apache/kafka container, for machines with a Docker engine. */
async function startKafkaContainer(client: ContainerRuntimeClient, options: KafkaOptions): Promise<KafkaHandle> {
  const { GenericContainer, Wait } = await import('testcontainers');
  const host = client.info.containerRuntime.host;
  // Kafka hands clients the advertised address, so the host port must be known before the broker
  // starts: bind a chosen free port instead of letting Docker pick one.
  const hostPort = await freePort(options.port);
  const settings: Record<string, string> = {
    ...BROKER_SETTINGS,
    'node.id': '1',
    'process.roles': 'broker,controller',
    'controller.quorum.voters': '1@localhost:9093',
    listeners: 'PLAINTEXT://0.0.0.0:9092,BROKER://0.0.0.0:29092,CONTROLLER://0.0.0.0:9093',
    // Clients reach PLAINTEXT through the mapped port; the broker talks to itself on BROKER.
    'advertised.listeners': `PLAINTEXT://${host}:${hostPort},BROKER://localhost:29092`,
    'listener.security.protocol.map': 'PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT',
    'inter.broker.listener.name': 'BROKER',
    'controller.listener.names': 'CONTROLLER',
    'log.dirs': '/tmp/kraft-combined-logs',
  };
  // The image turns KAFKA_FOO_BAR into foo.bar in its server.properties.
  const environment = Object.fromEntries(Object.entries(settings).map(([k, v]) => [`KAFKA_${k.toUpperCase().replaceAll('.', '_')}`, v]));
  environment.CLUSTER_ID = clusterId();
  environment.KAFKA_HEAP_OPTS = '-Xmx512m';
  log(`starting ${KAFKA_IMAGE} in Docker on ${host}:${hostPort}`);
  const container = await new GenericContainer(KAFKA_IMAGE)
    .withEnvironment(environment)
    .withExposedPorts({ container: 9092, host: hostPort })
    .withWaitStrategy(Wait.forLogMessage(/Kafka Server started/))
    .withStartupTimeout(180_000)
    .start();
  const brokers = [`${host}:${hostPort}`];
  await waitForKafka(brokers, { what: `Kafka container ${container.getId().slice(0, 12)}`, timeoutMs: 60_000 });
  await warmUpCoordinators(brokers, 30_000);
  return {
    brokers,
    version: KAFKA_VERSION,
    source: 'docker',
    containerId: container.getId(),
    stop: once(async () => {
      await container.stop();
    }),
  };
}

/** One node of a local cluster: broker and controller in one JVM. */
export interface KafkaClusterNode {
  id: number;
  /** PLAINTEXT address clients use. */
  broker: string;
  port: number;
  controllerPort: number;
  runDir: string;
  logFile: string;
  /** The node's JVM while it runs; undefined after kill(). */
  pid?: number;
}

export interface KafkaClusterHandle {
  /** Every node's PLAINTEXT address (a client bootstraps from any that answers). */
  brokers: string[];
  version: string;
  nodes: KafkaClusterNode[];
  /** kill -9 of one node's JVM, its data left in place; resolves once the process is gone. */
  kill(id: number): Promise<void>;
  /** Starts a killed node again on its data and ports; resolves once it is back in the cluster's metadata. */
  restart(id: number): Promise<void>;
  stop(): Promise<void>;
}

export interface KafkaClusterOptions {
  /** How many nodes, each broker and controller (a static quorum of all of them). Default 3. */
  nodes?: number;
  profile?: 'test' | 'dev';
  /**
   * Broker settings laid over the cluster's (e.g. broker.session.timeout.ms). The cluster's own: replication
   * factor min(3, nodes) for new topics, the offsets and the transaction state topics; min.insync.replicas
   * min(2, nodes).
   */
  settings?: Record<string, string>;
}

/**
 * A local KRaft cluster of `nodes` JVMs from the same jars as startLocalKafka, for fault scenarios that kill a
 * leader: every node broker and controller, controller.quorum.voters naming all of them, each with its own
 * ports and log dir, one cluster id stamped on each. Topics default to replication 3, min.insync.replicas 2.
 */
export async function startLocalKafkaCluster(options: KafkaClusterOptions = {}): Promise<KafkaClusterHandle> {
  const java = findJava();
  if (!java) throw new Error('no java in JAVA_HOME or on PATH');
  const count = options.nodes ?? 3;
  if (!Number.isInteger(count) || count < 1) throw new Error(`startLocalKafkaCluster: nodes must be a positive integer, not ${count}`);
  const profile = options.profile ?? 'test';
  const { cp, template, jvmExtra } = await prepareBrokerJvm(java);

  const taken: number[] = [];
  const nodes: KafkaClusterNode[] = [];
  for (let id = 1; id <= count; id++) {
    const port = await freePort(undefined, taken);
    taken.push(port);
    const controllerPort = await freePort(undefined, taken);
    taken.push(controllerPort);
    // Each node its own run dir directly under RUNS(), so sweepRuns finds each one's run.json.
    const runDir = await mkdtemp(path.join(RUNS(), `kafka-cluster-n${id}-`));
    nodes.push({ id, broker: `127.0.0.1:${port}`, port, controllerPort, runDir, logFile: path.join(runDir, 'broker.log') });
  }
  const replicas = String(Math.min(3, count));
  const minIsr = String(Math.min(2, count));
  const settings: Record<string, string> = {
    ...BROKER_SETTINGS,
    'default.replication.factor': replicas,
    'min.insync.replicas': minIsr,
    'offsets.topic.replication.factor': replicas,
    'transaction.state.log.replication.factor': replicas,
    'transaction.state.log.min.isr': minIsr,
    'share.coordinator.state.topic.replication.factor': replicas,
    'share.coordinator.state.topic.min.isr': minIsr,
    'unclean.leader.election.enable': 'false',
    ...options.settings,
  };
  const voters = nodes.map((n) => `${n.id}@127.0.0.1:${n.controllerPort}`).join(',');
  const id = clusterId();
  for (const n of nodes) {
    const dataDir = path.join(n.runDir, 'data');
    const props = {
      ...brokerProperties(dataDir, n.port, n.controllerPort),
      ...settings,
      'node.id': String(n.id),
      'controller.quorum.voters': voters,
    };
    await writeFile(path.join(n.runDir, 'server.properties'), properties(props) + '\n');
    await writeFile(path.join(n.runDir, 'log4j2.properties'), LOG4J2);
    // The template's bootstrap.checkpoint holds only the metadata version; meta.properties names the node.
    await mkdir(dataDir, { recursive: true });
    for (const file of readdirSync(template)) {
      if (file !== 'meta.properties') await copyFile(path.join(template, file), path.join(dataDir, file));
    }
    const meta = readFileSync(path.join(template, 'meta.properties'), 'utf8')
      .split('\n')
      .filter((line) => !/^(cluster\.id|directory\.id|node\.id)=/.test(line));
    meta.push(`node.id=${n.id}`, `cluster.id=${id}`, `directory.id=${clusterId()}`);
    await writeFile(path.join(dataDir, 'meta.properties'), meta.join('\n') + '\n');
  }

  const children = new Map<number, ChildProcess>();
  const brokers = nodes.map((n) => n.broker);
  // The node is up when the cluster's metadata names it again (a restarted one rejoins a running quorum).
  const registered = async (n: KafkaClusterNode, abort: () => string | undefined, timeoutMs: number) => {
    const kafka = new Kafka({
      clientId: 'testkit-cluster-probe',
      brokers: [n.broker],
      logLevel: logLevel.NOTHING,
      connectionTimeout: 3_000,
      requestTimeout: 5_000,
      retry: { retries: 0 },
    });
    await pollUntil(
      `local Kafka ${KAFKA_VERSION} node ${n.id} on ${n.broker}`,
      async () => {
        const admin = kafka.admin({ retry: { retries: 0 } });
        let timer: NodeJS.Timeout | undefined;
        try {
          // One attempt at most 10 s: a hung one must not use up the whole wait (pollUntil races only the deadline).
          const expired = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('attempt took over 10 s')), 10_000)));
          const attempt = (async () => {
            await admin.connect();
            const cluster = await admin.describeCluster();
            if (!cluster.brokers.some((b) => b.nodeId === n.id)) throw new Error(`node ${n.id} not registered yet`);
          })();
          attempt.catch(() => undefined);
          await Promise.race([attempt, expired]);
        } finally {
          clearTimeout(timer);
          await admin.disconnect().catch(() => undefined);
        }
      },
      { timeoutMs, intervalMs: 100, abort },
    );
  };
  const launch = async (n: KafkaClusterNode) => {
    const propsFile = path.join(n.runDir, 'server.properties');
    const base = jvmFlags(profile, [`-Dlog4j2.configurationFile=${path.join(n.runDir, 'log4j2.properties')}`]);
    const { child } = await startServer({
      what: `Kafka node ${n.id}`,
      command: java,
      args: [...base, ...jvmExtra, '-cp', cp, 'kafka.Kafka', propsFile],
      runDir: n.runDir,
      detached: false,
      logFile: n.logFile,
      marker: propsFile,
      ready: (abort) => registered(n, abort, 240_000),
      failSignal: 'SIGKILL',
      tailLines: 60,
    });
    children.set(n.id, child);
    n.pid = child.pid;
  };
  const stop = once(async () => {
    await Promise.all([...children.values()].map((c) => stopChild(c, 'SIGKILL', 10_000)));
    children.clear();
    await Promise.all(nodes.map((n) => rm(n.runDir, { recursive: true, force: true })));
  });
  try {
    // All at once: a node's controller waits for a quorum of the others before its broker can register.
    const started = await Promise.allSettled(nodes.map((n) => launch(n)));
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    await pollUntil(
      `all ${count} Kafka nodes registered`,
      async () => {
        const admin = new Kafka({ clientId: 'testkit-cluster-probe', brokers, logLevel: logLevel.NOTHING, retry: { retries: 0 } }).admin();
        try {
          await admin.connect();
          const cluster = await admin.describeCluster();
          if (cluster.brokers.length < count) throw new Error(`${cluster.brokers.length} of ${count} registered`);
        } finally {
          await admin.disconnect().catch(() => undefined);
        }
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    await warmUpCoordinators(brokers, 60_000);
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    brokers,
    version: KAFKA_VERSION,
    nodes,
    async kill(nodeId: number) {
      const child = children.get(nodeId);
      if (!child) throw new Error(`Kafka node ${nodeId} is not running`);
      await stopChild(child, 'SIGKILL', 10_000);
      children.delete(nodeId);
      nodes.find((n) => n.id === nodeId)!.pid = undefined;
    },
    async restart(nodeId: number) {
      const n = nodes.find((x) => x.id === nodeId);
      if (!n) throw new Error(`no Kafka node ${nodeId}`);
      if (children.has(nodeId)) throw new Error(`Kafka node ${nodeId} is running`);
      await launch(n);
    },
    stop,
  };
}
