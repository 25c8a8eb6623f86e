import { runService } from '@shopstream/runtime';
import { startQueryApi } from './index.js';

await runService('query-api', startQueryApi);
