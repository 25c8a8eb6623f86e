import { runServices } from '@shopstream/runtime';
import { flowMatcher } from './index.js';

await runServices([flowMatcher]);
