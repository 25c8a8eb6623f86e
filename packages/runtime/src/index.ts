export { openRuntime, checkTopicRetention, type Runtime, type RuntimeOptions, type FiniteRetention } from './runtime.js';
export { serve, exitOnSignals, type StartedService, type ServiceFactory } from './service.js';
export { runServices, StartupTimeoutError, type ServiceEntry, type ConsumerThread, type RunServicesOptions } from './runServices.js';
export { buildOpenApi } from './openapi.js';
export type { OpenApiPart, OpenApiOperation, OpenApiParam, OpenApiHeader, OpenApiHeaders } from '@shopstream/http';
export { buildAsyncApi } from './asyncapi.js';
