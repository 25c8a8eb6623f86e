import { loadEnv } from '@shopstream/config';
import { exitOnSignals, openRuntime, serve } from '@shopstream/runtime';
import { startQueryApi } from './index.js';

const env = loadEnv();
const rt = await openRuntime(env, 'query-api');
const { stop } = await serve(rt, [await startQueryApi(rt)], { port: env.PORT, host: env.HOST, name: 'query-api' });
exitOnSignals(stop);
