import { loadEnv } from '@shopstream/config';
import { exitOnSignals, openRuntime, serve } from '@shopstream/runtime';
import { startIngestApi } from './index.js';

const signals = exitOnSignals();
const env = loadEnv();
const rt = await openRuntime(env, 'ingest-api');
const { stop } = await serve(rt, [await startIngestApi(rt)], { port: env.PORT, host: env.HOST, name: 'ingest-api' });
signals.started(stop);
