import { runService } from '@shopstream/runtime';
import { startActivityProjector } from './index.js';

await runService('activity-projector', startActivityProjector);
