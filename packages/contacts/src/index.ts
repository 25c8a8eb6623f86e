export { contactStore } from './contactStore.js';
export { normalizePhone } from './phone.js';
