import type { ProjectionDefinition } from '@shopstream/bus';
import type { Env } from '@shopstream/config';
import type { ServiceEntry } from '@shopstream/runtime';
import { activityProjection, startActivityProjector } from '@shopstream/activity-projector';
import { flowMatcherProjection, startFlowMatcher } from '@shopstream/flow-matcher';
import { conversationProjection, startConversationProjector } from '@shopstream/conversation-projector';

/**
 * Every Shopstream service by the name `pnpm start <service>` takes: the HTTP APIs, then the consumers. A
 * consumer joins a consumer group; the runner starts it after the port listens: joining a group can take as
 * long as the session of a member that died without leaving (a kill -9), and the HTTP APIs need not wait for that.
 */
export const services: ServiceEntry[] = [
  // The HTTP APIs load on start: a process that only reads the declarations (`pnpm cli projections`) skips
  // express's routes, privacy and libphonenumber (a third of the CLI's start-up).
  { name: 'ingest-api', start: async (rt) => (await import('@shopstream/ingest-api')).startIngestApi(rt) },
  { name: 'query-api', start: async (rt) => (await import('@shopstream/query-api')).startQueryApi(rt) },
  { name: 'activity-projector', start: startActivityProjector, consumer: true, projection: () => activityProjection as ProjectionDefinition<unknown> },
  {
    name: 'flow-matcher',
    start: startFlowMatcher,
    consumer: true,
    projection: (env) => flowMatcherProjection(env.FLOW_REFRESH_MS) as ProjectionDefinition<unknown>,
  },
  {
    name: 'conversation-projector',
    start: startConversationProjector,
    consumer: true,
    projection: () => conversationProjection as ProjectionDefinition<unknown>,
  },
];

/** Every projection, from the services' declarations: what `pnpm cli projections` and /status list. */
export const projectionDefinitions = (env: Env): ProjectionDefinition<unknown>[] => services.flatMap((s) => (s.projection ? [s.projection(env)] : []));

export const serviceNames = services.map((s) => s.name);

/** Each service's factory by name, for tests and the benchmark server that compose services themselves. */
export const serviceFactories: Record<string, ServiceEntry['start']> = Object.fromEntries(services.map((s) => [s.name, s.start]));
