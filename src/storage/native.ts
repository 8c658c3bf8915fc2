import path from 'node:path';
import { extractAssetFile, runningSea, SEA_ASSET } from '../sea.js';

/**
 * better-sqlite3's `.node` addon cannot live inside a bundle. From source (tests) better-sqlite3
 * finds it itself and this returns undefined. Inside the single executable the addon is a SEA
 * asset, extracted once into `<data-dir>/.cache/<sha256>/better_sqlite3.node` (src/sea.ts) and
 * loaded with process.dlopen. From the plain bundle (dist/telemetryd.cjs) it is loaded from
 * node_modules next to dist/. The loaded module object goes to
 * `new Database(file, { nativeBinding })`, which accepts an addon object as well as a path.
 */
declare const __TELEMETRYD_BUNDLE__: boolean | undefined;

let cached: object | undefined;

export function loadNativeBinding(dataDir: string): object | undefined {
  if (cached) return cached;
  const sea = runningSea();
  let file: string | null = null;
  if (sea) {
    file = extractAssetFile(sea, dataDir, SEA_ASSET.addon, 'better_sqlite3.node', 0o700);
  } else if (typeof __TELEMETRYD_BUNDLE__ !== 'undefined' && __TELEMETRYD_BUNDLE__) {
    file = path.join(__dirname, '..', 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node');
  }
  if (!file) return undefined;
  const mod = { exports: {} as object };
  try {
    process.dlopen(mod, file);
  } catch (err) {
    // The usual causes: a noexec data dir, or a glibc older than the build machine's.
    throw new Error(`cannot load the SQLite addon ${file}: ${(err as Error).message}`);
  }
  cached = mod.exports;
  return cached;
}
