import type { ProjectionDefinition } from '@shopstream/projections';
import type { Env } from '@shopstream/config';
import type { MigrationSource } from '@shopstream/db';
import { fileURLToPath } from 'node:url';
import { migrationSourcesOf, type ServiceDefinition } from '@shopstream/runtime/define';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { ingestApiService } from '@shopstream/ingest-api';
import { activityProjector } from '@shopstream/activity-projector';
import { flowMatcher } from '@shopstream/flow-matcher';
import { conversationProjector } from '@shopstream/conversation-projector';
import { queryApi } from '@shopstream/query-api';

/**
 * Every Shopstream service, each its package's one declaration (`defineService`), by the name `pnpm start
 * <service>` and docker-compose.yml take: the HTTP APIs, then the consumers. Everything else is derived from
 * this list: the process's services, the CLI's projections, the migration owners, the compose file's services
 * (checked by test/compose.unit.spec.ts). A new service is its package and one line here.
 */
export const services: ServiceDefinition[] = [ingestApiService, queryApi, activityProjector, flowMatcher, conversationProjector];

/** Every projection, from the services' declarations: what `pnpm cli projections` and /status list. */
export const projectionDefinitions = (env: Env): ProjectionDefinition<unknown>[] => services.flatMap((s) => (s.projection ? [s.projection(env)] : []));

export const serviceNames = services.map((s) => s.name);

/** The all-in-one's own tables (embedded_demo): a folder beside its code like a service's. */
const ownMigrations: MigrationSource = { owner: 'all-in-one', dir: fileURLToPath(new URL('../migrations', import.meta.url)) };

/** The migrations every process applies: each service's folder, from its declaration, and the all-in-one's. */
export const migrationSources: MigrationSource[] = migrationSourcesOf(services, [ownMigrations]);

/** Each service's start on a whole runtime (its context cut from it), for tests and the benchmark server that compose services themselves. */
export const serviceFactories: Record<string, (rt: Runtime) => Promise<StartedService>> = Object.fromEntries(services.map((s) => [s.name, s.start]));
