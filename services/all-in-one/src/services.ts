import type { ServiceFactory } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startActivityProjector } from '@shopstream/activity-projector';
import { startFlowMatcher } from '@shopstream/flow-matcher';
import { startConversationProjector } from '@shopstream/conversation-projector';
import { startQueryApi } from '@shopstream/query-api';

/** Every Shopstream service by the name `pnpm start <service>` takes, in start order (consumers before the APIs). */
export const serviceFactories: Record<string, ServiceFactory> = {
  'activity-projector': startActivityProjector,
  'flow-matcher': startFlowMatcher,
  'conversation-projector': startConversationProjector,
  'ingest-api': startIngestApi,
  'query-api': startQueryApi,
};

export const serviceNames = Object.keys(serviceFactories);
