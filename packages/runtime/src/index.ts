export { openRuntime, checkTopicRetention, type Runtime, type RuntimeOptions, type FiniteRetention } from './runtime.js';
export { serve, exitOnSignals, type StartedService, type ServiceFactory } from './service.js';
export { runService } from './runService.js';
export { buildOpenApi, type OpenApiPart, type OpenApiOperation, type OpenApiParam, type OpenApiHeader, type OpenApiHeaders } from './openapi.js';
export { buildAsyncApi } from './asyncapi.js';
