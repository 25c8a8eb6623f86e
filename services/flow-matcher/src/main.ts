import { loadEnv } from '@shopstream/config';
import { exitOnSignals, openRuntime, serve } from '@shopstream/runtime';
import { startFlowMatcher } from './index.js';

const signals = exitOnSignals();
const env = loadEnv();
const rt = await openRuntime(env, 'flow-matcher');
const { stop } = await serve(rt, [await startFlowMatcher(rt)], { port: env.PORT, host: env.HOST, name: 'flow-matcher' });
signals.started(stop);
