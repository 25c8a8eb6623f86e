import { runServices } from '@shopstream/runtime';
import { startActivityProjector } from './index.js';

await runServices([{ name: 'activity-projector', start: startActivityProjector, consumer: true }]);
