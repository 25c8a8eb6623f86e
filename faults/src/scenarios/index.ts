import type { Scenario } from '../types.js';
import { postgresOutage } from './postgresOutage.js';
import { brokerOutage } from './brokerOutage.js';
import { leaderFailover } from './leaderFailover.js';
import { crash } from './crash.js';
import { badInput } from './badInput.js';
import { crossShop } from './crossShop.js';
import { noisyNeighbour } from './noisyNeighbour.js';
import { starve } from './starve.js';
import { rebuildUnderLoad } from './rebuildUnderLoad.js';
import { pause } from './pause.js';
import { scale } from './scale.js';
import { slowBroker } from './slowBroker.js';

/**
 * Every scenario `pnpm faults` knows, in the order a bare `pnpm faults` runs them. To add one: a module in
 * this directory exporting a `Scenario` (see ../types.ts), imported and listed here.
 */
export const scenarios: Scenario[] = [
  postgresOutage,
  brokerOutage,
  leaderFailover,
  crash,
  badInput,
  crossShop,
  noisyNeighbour,
  pause,
  scale,
  slowBroker,
  starve,
  rebuildUnderLoad,
];
