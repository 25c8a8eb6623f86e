import { runServices } from '@shopstream/runtime';
import { queryApi } from './index.js';

await runServices([queryApi]);
