import type { ServiceFactory } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startActivityProjector } from '@shopstream/activity-projector';
import { startFlowMatcher } from '@shopstream/flow-matcher';
import { startConversationProjector } from '@shopstream/conversation-projector';
import { startQueryApi } from '@shopstream/query-api';

/** Every Shopstream service by the name `pnpm start <service>` takes: the HTTP APIs, then the consumers. */
export const serviceFactories: Record<string, ServiceFactory> = {
  'ingest-api': startIngestApi,
  'query-api': startQueryApi,
  'activity-projector': startActivityProjector,
  'flow-matcher': startFlowMatcher,
  'conversation-projector': startConversationProjector,
};

/**
 * The services that consume topics in a consumer group. A process starts them after it listens: joining a
 * group can take as long as the session of a member that died without leaving (a kill -9), and the HTTP
 * APIs need not wait for that.
 */
export const consumerServices: ReadonlySet<string> = new Set(['activity-projector', 'flow-matcher', 'conversation-projector']);

export const serviceNames = Object.keys(serviceFactories);
