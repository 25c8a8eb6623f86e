import { fileURLToPath } from 'node:url';
import type { z } from 'zod';
import { runLiveProjection, type EmittedRecord, type ProjectionDefinition, type ProjectionLogic } from '@shopstream/projections';
import type { Env } from '@shopstream/config';
import type { TopicDefinition } from '@shopstream/contracts';
import type { MigrationSource } from '@shopstream/db';
import type { Runtime } from './runtime.js';
import type { StartedService } from './service.js';

/** The env schema a service picks its configuration slice from (`envSchema.pick({ ... })`). */
export { envSchema } from '@shopstream/config';

/** A topic as a service declares it reads or emits it: its definition (`defineTopic`). */
export type DeclaredTopic = Pick<TopicDefinition<unknown>, 'name' | 'role'>;

/** A service's configuration slice: a zod object picked from the env schema (`envSchema.pick({ ... })`). */
export type ConfigSlice = z.ZodObject<{ [K in keyof Env]?: z.ZodType }>;
/** The typed values of a configuration slice. */
export type ConfigOf<S extends ConfigSlice> = z.output<S>;

/**
 * What a service's start is given: the process's ports (database, bus, topic names, logger, API keys) and its
 * own slice of the configuration, typed, holding only the variables it declared. Not the whole `Env`.
 */
export type ServiceContext<C> = Omit<Runtime, 'env' | 'close'> & { config: C };

/** What a service package declares, once (`defineService`): everything else is derived from the list of these. */
export interface ServiceDeclaration<S extends ConfigSlice, P = unknown> {
  /** The name `pnpm start <name>` and docker-compose.yml's service take; also its migrations' owner. */
  name: string;
  /** `http`: routes behind the port. `consumer`: joins consumer groups, started once the port listens. */
  kind: 'http' | 'consumer';
  /** The variables it reads, picked from the env schema: its start receives only these. */
  config: S;
  /** The projection it runs live, given its configuration: /status, the CLI and the rebuild gauges list it. */
  projection?: (config: z.output<S>) => ProjectionDefinition<P>;
  /** Its migrations' folder, beside its code (`new URL('../migrations', import.meta.url)`). */
  migrations?: URL | string;
  /** The topics it reads and emits (documentation and the emit check); a projection's are its own. */
  topics?: { reads?: readonly DeclaredTopic[]; emits?: readonly DeclaredTopic[] };
  /**
   * Starts it on the process's ports. A consumer that declares a projection may leave it out: it then runs that
   * projection live (`runLiveProjection`, the group prefix and master key settings from its slice, which must
   * pick CONSUMER_GROUP_PREFIX).
   */
  start?(ctx: ServiceContext<z.output<S>>): Promise<StartedService>;
}

/** A declared service as the runner, the composers (all-in-one, CLI) and the tests take it. */
export interface ServiceDefinition<C = Partial<Env>> {
  name: string;
  kind: 'http' | 'consumer';
  /** The names of the variables it reads. */
  configKeys: readonly (keyof Env)[];
  /** Its slice of a parsed environment. */
  configOf(env: Env): C;
  /** What its start is given in a process whose runtime is `rt`. */
  context(rt: Runtime): ServiceContext<C>;
  projection?: (env: Env) => ProjectionDefinition<unknown>;
  migrations?: MigrationSource;
  topics: { reads: readonly DeclaredTopic[]; emits: readonly DeclaredTopic[] };
  /** Starts it on a whole runtime: its context is cut from it. */
  start(rt: Runtime): Promise<StartedService>;
}

/**
 * Declares a service. The slice is cut by key from the parsed environment (values are not parsed twice), so
 * the service sees exactly the variables it declared; a projection's `emit`s are checked against its
 * declared `emits` when it applies a batch (`checkedEmits`).
 */
export function defineService<S extends ConfigSlice, P>(d: ServiceDeclaration<S, P>): ServiceDefinition<z.output<S>> {
  const configKeys = Object.keys(d.config.shape) as (keyof Env)[];
  const sliceOf = (env: Env): Partial<Env> => Object.fromEntries(configKeys.map((k) => [k, env[k]]));
  const configOf = sliceOf as (env: Env) => z.output<S>;
  const context = (rt: Runtime): ServiceContext<z.output<S>> => {
    const { env, close: _close, ...ports } = rt;
    return { ...ports, config: configOf(env) };
  };
  const declared = d.projection;
  const projection = declared && ((env: Env) => checkedEmits(declared(configOf(env))) as ProjectionDefinition<unknown>);
  const own = d.start;
  let start: (rt: Runtime) => Promise<StartedService>;
  if (own) start = (rt) => own(context(rt));
  else if (projection && d.kind === 'consumer') start = projectionStart(d.name, configKeys, sliceOf, projection);
  else throw new Error(`service ${d.name} declares no start, and is not a consumer with a projection to run`);
  const migrations =
    d.migrations === undefined ? undefined : { owner: d.name, dir: typeof d.migrations === 'string' ? d.migrations : fileURLToPath(d.migrations) };
  return {
    name: d.name,
    kind: d.kind,
    configKeys,
    configOf,
    context,
    projection,
    migrations,
    topics: { reads: d.topics?.reads ?? [], emits: d.topics?.emits ?? [] },
    start,
  };
}

/** The start of a consumer that only runs its projection live: its checked form, on the service's own slice. */
function projectionStart(
  name: string,
  configKeys: readonly (keyof Env)[],
  sliceOf: (env: Env) => Partial<Env>,
  projection: (env: Env) => ProjectionDefinition<unknown>,
): (rt: Runtime) => Promise<StartedService> {
  if (!configKeys.includes('CONSUMER_GROUP_PREFIX')) throw new Error(`service ${name} runs a projection, so its config must pick CONSUMER_GROUP_PREFIX`);
  return async (rt) => {
    const config = sliceOf(rt.env);
    // checkedEmits is applied once, in the service's `projection`; runLiveProjection does not wrap it again.
    const def = projection(rt.env);
    const logger = rt.logger.child({ component: name });
    const live = await runLiveProjection(def, {
      bus: rt.bus,
      db: rt.db,
      logger,
      topics: rt.topics,
      groupPrefix: config.CONSUMER_GROUP_PREFIX!,
      // Its master key settings, as far as its slice picks them.
      env: config,
    });
    logger.info({ topic: def.source(rt.topics) }, `${name} started`);
    return { name, readiness: live.readiness, stop: () => live.stop() };
  };
}

/** An `emit` to a topic the projection did not declare in `emits`: a programming error, the batch fails. */
export class UndeclaredEmitError extends Error {
  constructor(projection: string, topic: string, declared: string[]) {
    super(`projection ${projection} emitted to ${topic}, which it does not declare in emits (${declared.join(', ') || 'none'})`);
    this.name = 'UndeclaredEmitError';
  }
}

/**
 * The projection with its logic's `apply` checked at run time: every record it returns must go to a topic of its
 * `emits`.
 */
export function checkedEmits<T>(def: ProjectionDefinition<T>): ProjectionDefinition<T> {
  return {
    ...def,
    async open(deps) {
      const logic: ProjectionLogic<T> = await def.open(deps);
      const declared = def.emits(deps.topics).map((e) => e.topic);
      const allowed = new Set(declared);
      return {
        ...logic,
        async apply(tx, records) {
          const out: EmittedRecord[] = await logic.apply(tx, records);
          for (const r of out) if (!allowed.has(r.topic)) throw new UndeclaredEmitError(def.name, r.topic, declared);
          return out;
        },
      };
    },
  };
}

/** Every service's migrations folder, by owner: what `migrate` applies in a process that runs these services. */
export function migrationSourcesOf(services: readonly ServiceDefinition[], extra: MigrationSource[] = []): MigrationSource[] {
  return [...services.flatMap((s) => (s.migrations ? [s.migrations] : [])), ...extra];
}
