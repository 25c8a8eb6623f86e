import { defineConfig } from 'vitest/config';
import { base, node24 } from './vitest.config.js';

/**
 * The Node 24 smoke test of the built image command (`pnpm test:node24`, a step of .ci/run after `pnpm test`):
 * it fetches Node 24 from the npm registry, so the README's `pnpm test` line does not. It runs the embedded
 * mode and needs neither the test broker nor the test database: no globalSetup.
 */
export default defineConfig({ ...base, test: { ...base.test, include: node24 } });
