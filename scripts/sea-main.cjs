// The single executable's SEA main script (scripts/build-binary.mjs, docs/executable.md): it
// compiles the real program, the SEA asset `app.cjs` (the CLI and server bundle wrapped as a
// CommonJS function), with a V8 code cache made after a start of the server (`app.cjs.codecache`).
//
// Why not Node's own `useCodeCache`: its cache is made at build time from compiling the main
// script only, so it holds the top-level code and none of the module bodies and functions a
// start runs; V8 compiled those lazily at every start (about 40 ms of a 315 ms start,
// BENCHMARKS.md). A cache from `script.createCachedData()` taken after a start holds every
// function compiled so far. A rejected cache (another V8, other V8 flags) only means a normal
// compile: `cachedDataRejected` is ignored on purpose.
//
// TELEMETRYD_SEA_CODE_CACHE_OUT=<file>: the build runs the executable once with it to write that
// cache when the process exits (after serve has started and been stopped).
'use strict';
const sea = require('node:sea');
const vm = require('node:vm');

// latin1: the bundle is ASCII (esbuild escapes the rest); a string this long is made an
// external string by Node, outside the V8 heap.
const source = Buffer.from(sea.getRawAsset('app.cjs')).toString('latin1');
let cachedData;
try {
  cachedData = Buffer.from(sea.getRawAsset('app.cjs.codecache'));
} catch {
  // built without a cache (cross build, or the build's cache-making run)
}
const script = new vm.Script(source, {
  filename: process.execPath,
  cachedData,
  importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
});
const cacheOut = process.env.TELEMETRYD_SEA_CODE_CACHE_OUT;
if (cacheOut) {
  delete process.env.TELEMETRYD_SEA_CODE_CACHE_OUT;
  process.on('exit', () => require('node:fs').writeFileSync(cacheOut, script.createCachedData()));
}
script.runInThisContext()(exports, require, module, __filename, __dirname);
