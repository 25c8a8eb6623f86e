import { runService } from '@shopstream/runtime';
import { startIngestApi } from './index.js';

await runService('ingest-api', startIngestApi);
