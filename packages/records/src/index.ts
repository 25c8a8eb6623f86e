export { activityId, activityKey } from './activityId.js';
export { buildRecord } from './eventRecord.js';
