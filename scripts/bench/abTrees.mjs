// What the A/B scripts (pipelineAb.mjs, serverAb.mjs) share: their options, the bench's device
// set, and the base revision checked out beside this tree.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

const argv = process.argv.slice(2);
/** The value after `name` on the command line, or `fallback`. */
export const option = (name, fallback) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : fallback;
};
export const flag = (name) => argv.includes(name);

/** The bench's device set (1,000 devices, no readings), made by `npm run bench`; exits without it. */
export function benchDeviceSet() {
  const benchCache = path.join(ROOT, '.cache', 'bench');
  const dir = existsSync(benchCache) ? readdirSync(benchCache).find((d) => d.startsWith('db-0-')) : undefined;
  if (!dir) {
    console.error('no bench device set in .cache/bench: run `npm run bench -- --quick --only=http` once first');
    process.exit(2);
  }
  return path.join(benchCache, dir);
}

/** A git worktree of revision `rev` under .cache/ab/, sharing this tree's node_modules. */
export function baseWorktree(rev) {
  const commit = execFileSync('git', ['rev-parse', '--short', rev], { cwd: ROOT, encoding: 'utf8' }).trim();
  const tree = path.join(ROOT, '.cache', 'ab', commit);
  mkdirSync(path.dirname(tree), { recursive: true });
  if (!existsSync(tree)) {
    execFileSync('git', ['worktree', 'add', '--detach', tree, commit], { cwd: ROOT, stdio: 'ignore' });
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(tree, 'node_modules'));
  }
  return { commit, tree };
}
