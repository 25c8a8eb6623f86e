export * from './errors.js';
export * from './events.js';
export * from './records.js';
export * from './topics.js';
export * from './conversations.js';
export * from './flows.js';
export * from './activities.js';
export * from './storableText.js';
