import { runServices } from '@shopstream/runtime';
import { activityProjector } from './index.js';

await runServices([activityProjector]);
