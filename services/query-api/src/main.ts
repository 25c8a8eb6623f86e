import { runServices } from '@shopstream/runtime';
import { startQueryApi } from './index.js';

await runServices([{ name: 'query-api', start: startQueryApi }]);
