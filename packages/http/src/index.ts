export { ApiError, ClientGone, clientGone, httpStatusOf, onDroppedError } from './errors.js';
export {
  createBaseApp,
  finishApp,
  errorHandler,
  jsonBody,
  requestContext,
  requestIdOf,
  sendError,
  sendJson,
  shedHandler,
  type AppParts,
  type ShedAnswer,
} from './app.js';
export { ApiKeyStore, bootstrapApiKeys, parseBootstrapKeys, newSecret, type ApiKeyInfo, type ResolvedKey } from './apiKeys.js';
export { bearerSecret, refusalAtOnce, requireAuth } from './auth.js';
export { FailedAuthLimiter } from './authFailures.js';
export { listen, type RunningServer, type ShedHandler } from './server.js';
export { HeldAnswers } from './heldAnswers.js';
export { AnswerRates, ingestAnswers, type AnswerBucket } from './answerRates.js';
export { validate } from './validate.js';
export { rateLimit, type RateLimitOptions } from './rateLimit.js';
export { LeasedRateLimiter, type LeasedRateLimitOptions, type RateDecision } from './leasedRateLimit.js';
export { cursorCodec, baseUrlOf, pageLink, type CursorCodec } from './cursor.js';
export {
  keysetPage,
  readKeysetPage,
  keysetCursorCodec,
  pinFingerprint,
  type KeysetCursor,
  type KeysetPage,
  type KeysetPageOptions,
  type KeysetSource,
  type KeysetWindow,
  type PageDirection,
  type PageQuery,
  type PinnedWindows,
} from './keysetPage.js';
export {
  API_PREFIX,
  defineRoute,
  mountRoutes,
  uuidPathParam,
  type Route,
  type RouteSpec,
  type RouteInput,
  type OpenApiOperation,
  type OpenApiPart,
  type OpenApiParam,
  type OpenApiHeader,
  type OpenApiHeaders,
} from './route.js';
