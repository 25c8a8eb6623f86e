import { runServices } from '@shopstream/runtime';
import { startIngestApi } from './index.js';

await runServices([{ name: 'ingest-api', start: startIngestApi }]);
