import { configDefaults, defineConfig } from 'vitest/config';

/**
 * The second run of the suite (TELEMETRYD_TEST_BACKEND=postgres, test/helpers/backend.ts)
 * leaves out what chooses its backend itself and so does the same in both runs: the
 * PostgreSQL and cluster tests (their own servers, beside SQLite data dirs), the benchmark's
 * quick run and the single executable's tests (their own processes, without the test helpers).
 */
const onPostgres = process.env.TELEMETRYD_TEST_BACKEND === 'postgres';
const sameInBothRuns = ['test/postgres/**', 'test/cluster/**', 'test/bench/**', 'test/binary/**'];

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: onPostgres ? [...configDefaults.exclude, ...sameInBothRuns] : configDefaults.exclude,
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
