import { runService } from '@shopstream/runtime';
import { startFlowMatcher } from './index.js';

await runService('flow-matcher', startFlowMatcher);
