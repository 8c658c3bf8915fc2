import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * better-sqlite3's `.node` addon cannot live inside a bundle. When running from source
 * (tests, tsx) better-sqlite3 finds it itself and this returns undefined. Inside the
 * single executable the addon is a SEA asset: it is extracted once into
 * `<data-dir>/.cache/<sha256>/better_sqlite3.node` (not /tmp, which may be noexec) and
 * loaded with process.dlopen. From the plain bundle (dist/telemetryd.cjs) it is loaded from
 * node_modules next to dist/.
 */
declare const __TELEMETRYD_BUNDLE__: boolean | undefined;

let cached: object | undefined;

export function loadNativeBinding(dataDir: string): object | undefined {
  if (cached) return cached;
  const sea = seaModule();
  if (sea?.isSea()) {
    const bytes = Buffer.from(sea.getRawAsset('better_sqlite3.node') as ArrayBuffer);
    const digest = createHash('sha256').update(bytes).digest('hex').slice(0, 16);
    const dir = path.join(dataDir, '.cache', digest);
    const file = path.join(dir, 'better_sqlite3.node');
    if (!existsSync(file)) {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      const tmp = `${file}.${process.pid}.tmp`;
      writeFileSync(tmp, bytes, { mode: 0o700 });
      renameSync(tmp, file);
    }
    const mod = { exports: {} as object };
    process.dlopen(mod, file);
    cached = mod.exports;
    return cached;
  }
  if (typeof __TELEMETRYD_BUNDLE__ !== 'undefined' && __TELEMETRYD_BUNDLE__) {
    const file = path.join(__dirname, '..', 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node');
    const mod = { exports: {} as object };
    process.dlopen(mod, file);
    cached = mod.exports;
    return cached;
  }
  return undefined;
}

interface SeaApi {
  isSea(): boolean;
  getRawAsset(name: string): ArrayBuffer;
  getAsset(name: string, encoding?: string): ArrayBuffer | string;
}

export function seaModule(): SeaApi | null {
  try {
    // node:sea exists from Node 20.12; older runtimes simply run unbundled.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    return (typeof require === 'function' ? require('node:sea') : null) as SeaApi | null;
  } catch {
    return null;
  }
}
