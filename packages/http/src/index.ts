export { ApiError, httpStatusOf } from './errors.js';
export { createBaseApp, finishApp, errorHandler, jsonBody, requestContext, sendError, sendJson, type AppParts } from './app.js';
export { ApiKeyStore, bootstrapApiKeys, parseBootstrapKeys, newSecret, type ApiKeyInfo, type ResolvedKey } from './apiKeys.js';
export { requireAuth } from './auth.js';
export { listen, type RunningServer } from './server.js';
export { validate } from './validate.js';
export { rateLimit, type RateLimitOptions } from './rateLimit.js';
export { cursorCodec, baseUrlOf, pageLink, type CursorCodec } from './cursor.js';
export { keysetPage, keysetCursorCodec, type KeysetCursor, type KeysetPage, type KeysetPageOptions, type PageDirection } from './keysetPage.js';
