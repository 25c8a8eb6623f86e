export { runCli, runCliCaptured, type CliRun } from './runCli.js';
export type { CliIo } from './io.js';
