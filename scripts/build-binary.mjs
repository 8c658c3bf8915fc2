// Builds the single executable dist/telemetryd with Node's built-in Single Executable
// Applications (SEA), offline apart from the npm registry (docs/executable.md):
//   1. `npm run build`: the one CommonJS bundle dist/telemetryd.cjs (and dist/web if built);
//   2. the pinned base Node binary, from the npm package node-linux-<arch> (cached);
//   3. better-sqlite3's addon compiled for exactly that Node, node-gyp --nodedir (cached);
//   4. the SEA blob (bundle + addon + dashboard files as assets), made by that same Node;
//   5. copy the base binary, strip it, inject the blob with postject.
//   6. (native builds) a V8 code cache of the program made by a start of that executable, and
//      the executable made again with it (scripts/sea-main.cjs).
// pkg / pkg-fetch cannot work here: they download base binaries from the internet.
//
// Usage: node scripts/build-binary.mjs [--arch x64|arm64] [--skip-bundle]
import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { arch as hostArch } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { baseNodeDir, NODE_VERSION } from './base-node.mjs';
import { bundleOptions, LAZY_PACKAGES, lazyAssetName, lazyBundleOptions } from './bundle-options.mjs';

const SEA_FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';
// Asset names: the same strings as SEA_ASSET in src/sea.ts.
const ASSET_ADDON = 'better_sqlite3.node';
const ASSET_WEB_MANIFEST = 'web-manifest.json';
const ASSET_WEB_PREFIX = 'web/';
const ASSET_DIGEST_SUFFIX = '.sha256';
// The program (scripts/sea-main.cjs loads it); its code cache is `${ASSET_APP}.codecache`.
const ASSET_APP = 'app.cjs';
// "<offset> <length>" of app.cjs then of its cache in the executable file, space padded.
const ASSET_APP_LOCATION = 'app.location';
const ASSET_APP_LOCATION_SIZE = 128;

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const argValue = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const targetArch = argValue('--arch') ?? 'x64';
if (!['x64', 'arm64'].includes(targetArch)) fail(`--arch must be x64 or arm64, got ${targetArch}`);
const cross = targetArch !== hostArch();
const cacheDir = path.join(root, '.cache');
const distDir = path.join(root, 'dist');
const output = path.join(distDir, targetArch === 'x64' ? 'telemetryd' : `telemetryd-linux-${targetArch}`);

const started = Date.now();
const step = (what) => console.log(`[build-binary +${((Date.now() - started) / 1000).toFixed(1)}s] ${what}`);

function fail(message) {
  console.error(`build-binary: ${message}`);
  process.exit(1);
}

/**
 * Runs a command, inheriting output (or, with quiet, keeping it and showing its tail only on
 * failure: the compiler's warnings about better-sqlite3 are noise); fails the build with the
 * command line on error.
 */
function run(cmd, cmdArgs, opts = {}, quiet = false) {
  const r = spawnSync(cmd, cmdArgs, {
    stdio: quiet ? ['ignore', 'pipe', 'pipe'] : 'inherit',
    cwd: root,
    maxBuffer: 256 * 1024 * 1024,
    ...opts,
  });
  if (r.error) fail(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) {
    if (quiet) process.stderr.write(`${`${r.stdout}\n${r.stderr}`.split('\n').slice(-60).join('\n')}\n`);
    fail(`${cmd} ${cmdArgs.join(' ')} exited with ${r.status ?? r.signal}`);
  }
}

/** npm may set npm_config_nodedir (for the host Node): the addon build must not see it. */
function cleanEnv(extra = {}) {
  const env = { ...process.env, ...extra };
  for (const key of Object.keys(env)) if (/^npm_config_(nodedir|arch|target|runtime|dist_url)$/i.test(key)) delete env[key];
  return env;
}

/** The official Node binary and headers for one arch, from the npm package node-linux-<arch>. */
function baseNode(nodeArch) {
  const dir = baseNodeDir(cacheDir, nodeArch);
  const pkgDir = path.join(dir, 'package');
  if (existsSync(path.join(pkgDir, 'bin', 'node')) && existsSync(path.join(pkgDir, 'include', 'node', 'node.h'))) return pkgDir;
  step(`fetching node-linux-${nodeArch}@${NODE_VERSION} with npm pack`);
  rmSync(dir, { recursive: true, force: true });
  const tmp = `${dir}.${process.pid}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  // npm pack only downloads the tarball: the package's install scripts never run.
  run('npm', ['pack', `node-linux-${nodeArch}@${NODE_VERSION}`, '--silent', '--pack-destination', tmp], { env: cleanEnv() });
  const tgz = readdirSync(tmp).find((f) => f.endsWith('.tgz'));
  if (!tgz) fail(`npm pack node-linux-${nodeArch}@${NODE_VERSION} produced no tarball`);
  run('tar', ['xzf', path.join(tmp, tgz), '-C', tmp]);
  rmSync(path.join(tmp, tgz));
  renameSync(tmp, dir);
  return pkgDir;
}

/** better-sqlite3's addon compiled for exactly NODE_VERSION; cached by the versions. */
function addon(nodeDir) {
  const bsDir = path.join(root, 'node_modules', 'better-sqlite3');
  const bsVersion = JSON.parse(readFileSync(path.join(bsDir, 'package.json'), 'utf8')).version;
  const key = `better-sqlite3-${bsVersion}-node-${NODE_VERSION}-linux-${targetArch}`;
  const cached = path.join(cacheDir, 'addon', key, 'better_sqlite3.node');
  if (existsSync(cached)) return cached;
  step(`compiling better-sqlite3 ${bsVersion} for Node ${NODE_VERSION} linux-${targetArch} (cached afterwards in .cache/addon/)`);
  // Build in a copy: rebuilding node_modules/better-sqlite3 in place would break it for the
  // host Node that runs the tests.
  const work = path.join(cacheDir, 'addon', `${key}.${process.pid}.build`);
  rmSync(work, { recursive: true, force: true });
  cpSync(bsDir, work, { recursive: true, filter: (src) => path.basename(src) !== 'build' || path.dirname(src) !== bsDir });
  const gyp = process.env.npm_config_node_gyp || findOnPath('node-gyp');
  if (!gyp) fail('node-gyp not found: run this through npm (npm run build:binary), which ships node-gyp');
  const gypArgs = ['rebuild', '--release', `--nodedir=${nodeDir}`, `--arch=${targetArch}`, '--jobs=max'];
  const crossEnv =
    targetArch === 'arm64' && cross
      ? { CC: 'aarch64-linux-gnu-gcc', CXX: 'aarch64-linux-gnu-g++', LINK: 'aarch64-linux-gnu-g++', AR: 'aarch64-linux-gnu-ar' }
      : {};
  if (gyp.endsWith('.js')) run(process.execPath, [gyp, ...gypArgs], { cwd: work, env: cleanEnv(crossEnv) }, true);
  else run(gyp, gypArgs, { cwd: work, env: cleanEnv(crossEnv) }, true);
  mkdirSync(path.dirname(cached), { recursive: true });
  copyFileSync(path.join(work, 'build', 'Release', 'better_sqlite3.node'), `${cached}.tmp`);
  renameSync(`${cached}.tmp`, cached);
  rmSync(work, { recursive: true, force: true });
  return cached;
}

/** The commit stamped into the bundle (as scripts/build.mjs does). */
function gitCommit() {
  const r = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : 'unknown';
}

function findOnPath(name) {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    const file = path.join(dir, name);
    if (dir && existsSync(file)) return file;
  }
  return null;
}

/** Every file under dist/web, as paths relative to it (sorted: the manifest hash is stable). */
function webFiles(webDir) {
  if (!existsSync(path.join(webDir, 'index.html'))) return [];
  const out = [];
  const walk = (rel) => {
    for (const entry of readdirSync(path.join(webDir, rel), { withFileTypes: true })) {
      const child = rel ? `${rel}/${entry.name}` : entry.name;
      if (entry.isDirectory()) walk(child);
      else if (entry.isFile()) out.push(child);
    }
  };
  walk('');
  return out.sort();
}

// 1. The bundle (and the dashboard, when `npm run build` builds it).
if (!args.includes('--skip-bundle')) {
  step('npm run build');
  run('npm', ['run', '--silent', 'build']);
}
const bundle = path.join(distDir, 'telemetryd.cjs');
if (!existsSync(bundle)) fail('dist/telemetryd.cjs is missing');

// 2. Base Node binaries: the target's, and for a cross build the host's of the same version
// (the blob must be made by exactly the base binary's version).
const targetNode = baseNode(targetArch);
const blobNode = cross ? baseNode(hostArch()) : targetNode;

// 3. The addon.
const addonFile = addon(targetNode);

// 4. The SEA blob.
step('making the SEA blob');
const seaDir = path.join(cacheDir, 'sea', `linux-${targetArch}`);
rmSync(seaDir, { recursive: true, force: true });
mkdirSync(seaDir, { recursive: true });
// The main script: the same bundle as dist/telemetryd.cjs, but the packages loaded only on
// first use are separate assets (scripts/bundle-options.mjs, src/seaLazy.ts): Node copies the
// whole main script into the heap at every start, so they cost idle RSS and start time.
const main = path.join(seaDir, 'main.cjs');
await build(bundleOptions({ commit: gitCommit(), outfile: main, sea: true }));
// The SEA's main script is the small loader scripts/sea-main.cjs; the program is the asset
// app.cjs, wrapped as a CommonJS function on one line (stack trace line numbers unchanged), and
// compiled by the loader with a code cache made after a start (step 6).
const app = path.join(seaDir, ASSET_APP);
writeFileSync(app, `(function (exports, require, module, __filename, __dirname) {${readFileSync(main, 'latin1')}\n})`, 'latin1');
const assets = { [ASSET_ADDON]: addonFile, [ASSET_APP]: app };
for (const pkg of LAZY_PACKAGES) {
  const file = path.join(seaDir, lazyAssetName(pkg));
  await build(lazyBundleOptions(pkg, file));
  assets[lazyAssetName(pkg)] = file;
}
// The addon's digest names its extraction directory; recorded here so a start does not hash
// (and so read into memory) the whole 2 MB addon inside the executable (src/sea.ts).
const addonDigestFile = path.join(seaDir, `${ASSET_ADDON}${ASSET_DIGEST_SUFFIX}`);
writeFileSync(addonDigestFile, createHash('sha256').update(readFileSync(addonFile)).digest('hex').slice(0, 16));
assets[ASSET_ADDON + ASSET_DIGEST_SUFFIX] = addonDigestFile;
const webDir = path.join(distDir, 'web');
const files = webFiles(webDir);
if (files.length === 0) console.warn('build-binary: dist/web/index.html not found: the executable will have no dashboard');
const webHash = createHash('sha256');
for (const rel of files) {
  assets[ASSET_WEB_PREFIX + rel] = path.join(webDir, rel);
  webHash
    .update(`${rel}\0`)
    .update(readFileSync(path.join(webDir, rel)))
    .update('\0');
}
const manifestFile = path.join(seaDir, ASSET_WEB_MANIFEST);
writeFileSync(manifestFile, JSON.stringify({ hash: webHash.digest('hex'), files }));
assets[ASSET_WEB_MANIFEST] = manifestFile;
const strippedNode = path.join(seaDir, 'node-stripped');
copyFileSync(path.join(targetNode, 'bin', 'node'), strippedNode);
run(targetArch === 'arm64' && cross ? 'aarch64-linux-gnu-strip' : 'strip', [strippedNode]);

/** 5. The executable: the blob of these assets injected into a copy of the stripped node. */
function writeExecutable(blobAssets, file) {
  const blob = path.join(seaDir, 'sea-prep.blob');
  const seaConfig = path.join(seaDir, 'sea-config.json');
  writeFileSync(
    seaConfig,
    JSON.stringify(
      {
        main: path.join(root, 'scripts', 'sea-main.cjs'),
        output: blob,
        disableExperimentalSEAWarning: true,
        // The loader is a few lines; the program's code cache is the asset app.cjs.codecache.
        useCodeCache: false,
        useSnapshot: false,
        assets: blobAssets,
      },
      null,
      2,
    ),
  );
  run(path.join(blobNode, 'bin', 'node'), ['--experimental-sea-config', seaConfig], { cwd: seaDir, env: cleanEnv() });
  const tmpOut = `${file}.${process.pid}.tmp`;
  copyFileSync(strippedNode, tmpOut);
  chmodSync(tmpOut, 0o755);
  // postject prints "Can't find string offset for section name" warnings: harmless.
  run(
    process.execPath,
    [path.join(root, 'node_modules', 'postject', 'dist', 'cli.js'), tmpOut, 'NODE_SEA_BLOB', blob, '--sentinel-fuse', SEA_FUSE],
    {},
    true,
  );
  // The final file is a fresh copy, not postject's output renamed: postject writes the 110 MB
  // in one write(), which leaves the file in the page cache as large folios, and every page
  // fault of the executable then maps a whole large folio, growing the idle RSS for the same
  // bytes (BENCHMARKS.md, "Design decisions"). A copied, installed or cold-read file is cached in small pieces.
  const copied = `${file}.${process.pid}.copy`;
  copyFileSync(tmpOut, copied);
  rmSync(tmpOut);
  renameSync(copied, file);
}

/**
 * Runs `serve` of an executable once to warm a data dir (assets extracted, certificate made),
 * then once more with TELEMETRYD_SEA_CODE_CACHE_OUT: it is stopped once both listeners are up
 * and, exiting, writes the V8 code cache of app.cjs with every function the start compiled
 * (scripts/sea-main.cjs).
 */
async function makeCodeCache(exe) {
  // Under .cache, not /tmp: the run extracts the addon into its data dir, and dlopen fails
  // on a noexec /tmp (docs/executable.md).
  const dir = mkdtempSync(path.join(seaDir, 'codecache-run-'));
  const cacheFile = path.join(seaDir, `${ASSET_APP}.codecache`);
  try {
    const serveOnce = (env) =>
      new Promise((resolve, reject) => {
        const child = spawn(
          exe,
          [
            'serve',
            '--data-dir',
            path.join(dir, 'data'),
            '--host',
            '127.0.0.1',
            '--http-port',
            '0',
            '--mqtt-port',
            '0',
            '--log-level',
            'warn',
          ],
          { cwd: dir, env: { PATH: process.env.PATH, HOME: dir, ...env }, stdio: ['ignore', 'pipe', 'inherit'] },
        );
        let out = '';
        const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
        child.stdout.on('data', (d) => {
          out += d;
          if (/HTTP listening on/.test(out) && /MQTT over TLS listening on/.test(out) && !child.stopping) {
            child.stopping = true;
            child.kill('SIGTERM');
          }
        });
        child.on('exit', (code, signal) => {
          clearTimeout(timer);
          if (code === 0) resolve();
          else reject(new Error(`serve exited with ${code ?? signal}: ${out}`));
        });
      });
    await serveOnce({});
    await serveOnce({ TELEMETRYD_SEA_CODE_CACHE_OUT: cacheFile });
    if (!existsSync(cacheFile)) fail('the code cache run wrote no cache');
    return cacheFile;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The loader reads app.cjs and its cache from the executable file, not from the mapped assets
 * (scripts/sea-main.cjs: mapped pages once read stay in the RSS): their offsets in the final
 * file go into the asset app.location, a fixed-size placeholder with a marker unique to this
 * build, overwritten in place. The loader checks the bytes it reads against the assets' edges.
 */
const locationPlaceholder = `x${randomBytes(16).toString('hex')}`.padEnd(ASSET_APP_LOCATION_SIZE, ' ');
const locationFile = path.join(seaDir, ASSET_APP_LOCATION);
writeFileSync(locationFile, locationPlaceholder, 'latin1');
function recordAssetPlaces(file, assetFiles) {
  const image = readFileSync(file);
  const at = image.indexOf(locationPlaceholder, 0, 'latin1');
  if (at < 0 || image.indexOf(locationPlaceholder, at + 1, 'latin1') >= 0) fail('app.location placeholder not found exactly once');
  const places = assetFiles.map((f) => {
    const bytes = readFileSync(f);
    const offset = image.indexOf(bytes);
    if (offset < 0) fail(`${f} not found in ${file}`);
    return `${offset} ${bytes.length}`;
  });
  const text = places.join(' ').padEnd(ASSET_APP_LOCATION_SIZE, ' ');
  if (text.length !== ASSET_APP_LOCATION_SIZE) fail('app.location overflow');
  const fd = openSync(file, 'r+');
  try {
    writeSync(fd, Buffer.from(text, 'latin1'), 0, ASSET_APP_LOCATION_SIZE, at);
  } finally {
    closeSync(fd);
  }
}

step('injecting the blob into a stripped copy of node');
writeExecutable(assets, output);
if (!cross) {
  // 6. A V8 code cache of app.cjs made by a start of this very executable (same V8, same
  // flags), then the executable again with the cache as an asset. A cross-built executable
  // cannot run here (and V8's cache is architecture specific): it compiles without one.
  step('making the code cache from a start of the executable');
  const cacheFile = await makeCodeCache(output);
  step(`code cache ${(statSync(cacheFile).size / 1024 / 1024).toFixed(1)} MB; injecting again with it`);
  writeExecutable({ ...assets, [`${ASSET_APP}.codecache`]: cacheFile, [ASSET_APP_LOCATION]: locationFile }, output);
  recordAssetPlaces(output, [app, cacheFile]);
}
rmSync(strippedNode);
const mb = (statSync(output).size / 1024 / 1024).toFixed(1);
step(`built ${path.relative(root, output)} (${mb} MB, Node ${NODE_VERSION} linux-${targetArch}, ${files.length} dashboard files)`);
