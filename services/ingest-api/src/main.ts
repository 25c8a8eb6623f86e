import { runServices } from '@shopstream/runtime';
import { ingestApiService } from './index.js';

await runServices([ingestApiService]);
