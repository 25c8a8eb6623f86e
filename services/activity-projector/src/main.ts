import { loadEnv } from '@shopstream/config';
import { exitOnSignals, openRuntime, serve } from '@shopstream/runtime';
import { startActivityProjector } from './index.js';

const signals = exitOnSignals();
const env = loadEnv();
const rt = await openRuntime(env, 'activity-projector');
const { stop } = await serve(rt, [await startActivityProjector(rt)], { port: env.PORT, host: env.HOST, name: 'activity-projector' });
signals.started(stop);
