import { runServices } from '@shopstream/runtime';
import { startFlowMatcher } from './index.js';

await runServices([{ name: 'flow-matcher', start: startFlowMatcher, consumer: true }]);
