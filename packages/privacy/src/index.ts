export { openKeyring, keyringOf, parseKeyList, newMasterKeyText, fingerprint, type Keyring, type KeyringSource, type MasterKeySettings } from './keyring.js';
export {
  ContactKeys,
  KeyCache,
  contactStates,
  makeDataKeys,
  type ContactRef,
  type ContactStates,
  type DataKey,
  type KeyRow,
  type MadeKey,
} from './dataKeys.js';
export {
  sealEventRecords,
  sealEventRecord,
  sealPersonal,
  sealedPartJson,
  splitPersonal,
  contactPersonal,
  openEventRecords,
  openEventRecordsWith,
} from './sealEvents.js';
export { openConversationRecords } from './erasedConversations.js';
export { ConversationSealer } from './sealConversations.js';
export { withoutErasedContacts } from './erasedContacts.js';
export { erasureJobs, runErasureJob } from './erasureJobs.js';
export { startErasureWorker, type ErasureWorker } from './erasureWorker.js';
export { rotateMasterKey } from './rotateMasterKey.js';
