import { execFileSync } from 'node:child_process';

/** Builds the CLI bundle once per test run, so CLI tests exercise the real artifact. */
export default function setup() {
  execFileSync(process.execPath, ['scripts/build.mjs'], { stdio: 'inherit' });
}
