export { contactStore } from './contactStore.js';
