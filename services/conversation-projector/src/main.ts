import { runServices } from '@shopstream/runtime';
import { conversationProjector } from './index.js';

await runServices([conversationProjector]);
