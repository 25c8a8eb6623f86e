export { flowStore, strip, type PositionedFlow } from './flowStore.js';
export { flowVersions, type FlowVersionRow } from './flowVersions.js';
