import { execFileSync } from 'node:child_process';
import type { TestProject } from 'vitest/node';
import { startPostgres } from './postgres.js';

/**
 * Builds the CLI bundle once per test run, so CLI tests exercise the real artifact. With
 * TELEMETRYD_TEST_BACKEND=postgres, also starts the run's one throwaway PostgreSQL server
 * (each test server and data dir then gets a database of its own on it: backend.ts) and
 * stops it at the end.
 */
// Not imported from backend.ts, which imports the test-side half of vitest.
const BACKEND_VARIABLE = 'TELEMETRYD_TEST_BACKEND';

export default async function setup(project: TestProject) {
  execFileSync(process.execPath, ['scripts/build.mjs'], { stdio: 'inherit' });
  const backend = process.env[BACKEND_VARIABLE] ?? 'sqlite';
  if (backend !== 'postgres' && backend !== 'sqlite') throw new Error(`${BACKEND_VARIABLE} must be sqlite or postgres, not ${backend}`);
  if (backend === 'sqlite') {
    project.provide('postgres', null);
    return;
  }
  const server = await startPostgres();
  const { kill, start, stop, ...info } = server;
  project.provide('postgres', info);
  return () => stop();
}
