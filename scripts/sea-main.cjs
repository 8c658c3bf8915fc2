// The single executable's SEA main script (scripts/build-binary.mjs, docs/executable.md): it
// compiles the real program, the SEA asset `app.cjs` (the CLI and server bundle wrapped as a
// CommonJS function), with a V8 code cache made after a start of the server (`app.cjs.codecache`).
//
// Why not Node's own `useCodeCache`: its cache is made at build time from compiling the main
// script only, so it holds the top-level code and none of the module bodies and functions a
// start runs, and V8 would compile those lazily at every start (BENCHMARKS.md, "Design decisions"). A cache from `script.createCachedData()` taken after a start holds every
// function compiled so far. A rejected cache (another V8, other V8 flags) only means a normal
// compile: `cachedDataRejected` is ignored on purpose.
//
// TELEMETRYD_SEA_CODE_CACHE_OUT=<file>: the build runs the executable once with it to write that
// cache when the process exits (after serve has started and been stopped).
'use strict';
const sea = require('node:sea');
const vm = require('node:vm');

const fs = require('node:fs');

/**
 * An asset's bytes, read from the executable file at the offset the build recorded in the
 * asset `app.location` ("<offset> <length>" per asset, after the loader's marker), else the
 * asset itself. Why read the file: an asset is a view of the executable's mapped pages, and
 * every page a start reads stays in the process's RSS for its whole life; the two large assets
 * are needed once (V8 copies the source and deserializes the cache), so read through the page
 * cache into a buffer that is freed they cost nothing at idle.
 */
function readAsset(name, index) {
  const mapped = () => Buffer.from(sea.getRawAsset(name));
  let located;
  try {
    const fields = Buffer.from(sea.getRawAsset('app.location')).toString('latin1').trim().split(/\s+/).map(Number);
    located = { offset: fields[2 * index], length: fields[2 * index + 1] };
  } catch {
    return mapped();
  }
  if (!(located.length > 0)) return mapped();
  const bytes = Buffer.allocUnsafeSlow(located.length);
  const fd = fs.openSync(process.execPath, 'r');
  try {
    if (fs.readSync(fd, bytes, 0, located.length, located.offset) !== located.length) return mapped();
  } finally {
    fs.closeSync(fd);
  }
  // The recorded place is checked against the asset's first and last bytes (two pages).
  const asset = sea.getRawAsset(name);
  const edge = Math.min(256, located.length);
  if (
    asset.byteLength !== located.length ||
    !bytes.subarray(0, edge).equals(Buffer.from(asset, 0, edge)) ||
    !bytes.subarray(-edge).equals(Buffer.from(asset, asset.byteLength - edge, edge))
  )
    return mapped();
  return bytes;
}

let cachedData;
try {
  cachedData = readAsset('app.cjs.codecache', 1);
} catch {
  // built without a cache (cross build, or the build's cache-making run)
}
// latin1: the bundle is ASCII (esbuild escapes the rest); a string this long is made an
// external string by Node (a copy outside the V8 heap).
const source = readAsset('app.cjs', 0).toString('latin1');
const script = new vm.Script(source, {
  filename: process.execPath,
  cachedData,
  importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
});
const cacheOut = process.env.TELEMETRYD_SEA_CODE_CACHE_OUT;
if (cacheOut) {
  delete process.env.TELEMETRYD_SEA_CODE_CACHE_OUT;
  process.on('exit', () => fs.writeFileSync(cacheOut, script.createCachedData()));
}
cachedData = undefined;
script.runInThisContext()(exports, require, module, __filename, __dirname);
