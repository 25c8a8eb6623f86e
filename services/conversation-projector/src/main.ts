import { runServices } from '@shopstream/runtime';
import { startConversationProjector } from './index.js';

await runServices([{ name: 'conversation-projector', start: startConversationProjector, consumer: true }]);
