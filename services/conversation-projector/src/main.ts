import { runService } from '@shopstream/runtime';
import { startConversationProjector } from './index.js';

await runService('conversation-projector', startConversationProjector);
