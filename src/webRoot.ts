import { existsSync } from 'node:fs';
import path from 'node:path';
import { extractWebRoot, runningSea } from './sea.js';

let seaWebRoot: string | null | undefined;

/**
 * Where the built dashboard files are (index.html and its assets), or null when they were
 * not built. Inside the single executable they are SEA assets, extracted once to
 * `<data-dir>/.cache/web-<hash>/` (src/sea.ts, scripts/build-binary.mjs); from a checkout they
 * are in dist/web (made by `npm run build`).
 */
export function resolveWebRoot(dataDir: string): string | null {
  const sea = runningSea();
  if (sea) {
    if (seaWebRoot === undefined) seaWebRoot = extractWebRoot(sea, dataDir);
    return seaWebRoot;
  }
  const candidates = [path.resolve('dist/web')];
  if (typeof __dirname !== 'undefined') candidates.unshift(path.join(__dirname, 'web'));
  return candidates.find((dir) => existsSync(path.join(dir, 'index.html'))) ?? null;
}
