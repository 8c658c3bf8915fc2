import { existsSync } from 'node:fs';
import path from 'node:path';

/**
 * Where the built dashboard files are (index.html and its assets), or null when they were
 * not built. From a checkout they are in dist/web (made by `npm run build`); inside the single
 * executable they are SEA assets extracted under the data dir (scripts/build-binary.mjs).
 */
export function resolveWebRoot(_dataDir: string): string | null {
  const candidates = [path.resolve('dist/web')];
  if (typeof __dirname !== 'undefined') candidates.unshift(path.join(__dirname, 'web'));
  return candidates.find((dir) => existsSync(path.join(dir, 'index.html'))) ?? null;
}
