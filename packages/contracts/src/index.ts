export * from './errors.js';
export * from './events.js';
export * from './records.js';
export * from './topics.js';
