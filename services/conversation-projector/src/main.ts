import { loadEnv } from '@shopstream/config';
import { exitOnSignals, openRuntime, serve } from '@shopstream/runtime';
import { startConversationProjector } from './index.js';

const signals = exitOnSignals();
const env = loadEnv();
const rt = await openRuntime(env, 'conversation-projector');
const { stop } = await serve(rt, [await startConversationProjector(rt)], { port: env.PORT, host: env.HOST, name: 'conversation-projector' });
signals.started(stop);
