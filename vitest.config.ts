import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Builds dist/telemetryd.cjs once: CLI tests run the real bundle in child processes.
    globalSetup: ['test/helpers/globalSetup.ts'],
    // Generous: a guard against hangs, not a speed check (the machine is shared and noisy).
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Two cores: files run in parallel forks, but not so many that timing-sensitive
    // protocol tests starve.
    pool: 'forks',
    maxWorkers: 2,
    reporters: ['default'],
  },
});
