export { openRuntime, checkTopicRetention, type Runtime, type RuntimeOptions, type KafkaSettings, type FiniteRetention } from './runtime.js';
export { serve, exitOnSignals, type StartedService, type ServiceFactory } from './service.js';
export { runServices, StartupTimeoutError, type ConsumerThread, type RunServicesOptions } from './runServices.js';
// Also `@shopstream/runtime/define` alone: a service's declaration loads no express (the CLI reads declarations).
export {
  defineService,
  envSchema,
  migrationSourcesOf,
  UndeclaredEmitError,
  type ConfigSlice,
  type ConfigOf,
  type ServiceContext,
  type ServiceDeclaration,
  type ServiceDefinition,
} from './defineService.js';
export { buildOpenApi } from './openapi.js';
export type { OpenApiPart, OpenApiOperation, OpenApiParam, OpenApiHeader, OpenApiHeaders } from '@shopstream/http';
export { buildAsyncApi } from './asyncapi.js';
