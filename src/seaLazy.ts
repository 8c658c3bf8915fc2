import { createRequire } from 'node:module';
import { compileFunction } from 'node:vm';
import { runningSea } from './sea.js';

/**
 * Modules loaded on first use only (exceljs, selfsigned, nodemailer) are, in the single
 * executable, separate CommonJS bundles stored as SEA assets (`lazy/<name>.cjs`,
 * scripts/build-binary.mjs), not part of the main script. Node copies the whole main script
 * into the V8 heap at every start, so each megabyte of it cost about two megabytes of idle
 * RSS (the copy and the executable's pages read to make it) and its share of start time
 * (BENCHMARKS.md, "Design decisions"). The build resolves `import('exceljs')` etc. to a call of this function.
 */
const loaded = new Map<string, unknown>();

export function loadLazyAsset(assetName: string): unknown {
  if (loaded.has(assetName)) return loaded.get(assetName);
  const sea = runningSea() as (ReturnType<typeof runningSea> & { getAsset(name: string, encoding: string): string }) | null;
  if (!sea) throw new Error(`${assetName}: lazily loaded modules are SEA assets; not running as the single executable`);
  const source = sea.getAsset(assetName, 'utf8');
  const filename = `${process.execPath}/${assetName}`;
  const wrapper = compileFunction(source, ['exports', 'require', 'module', '__filename', '__dirname'], { filename });
  const module = { exports: {} as unknown };
  // The bundle is self-contained: it requires built-in modules only.
  wrapper(module.exports, createRequire(process.execPath), module, filename, process.execPath);
  loaded.set(assetName, module.exports);
  return module.exports;
}
