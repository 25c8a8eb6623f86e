import { loadEnv } from '@shopstream/config';
import { exitOnSignals, openRuntime, serve } from '@shopstream/runtime';
import { startQueryApi } from './index.js';

const signals = exitOnSignals();
const env = loadEnv();
const rt = await openRuntime(env, 'query-api');
const { stop } = await serve(rt, [await startQueryApi(rt)], { port: env.PORT, host: env.HOST, name: 'query-api' });
signals.started(stop);
