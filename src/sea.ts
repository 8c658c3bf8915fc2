import { createHash } from 'node:crypto';
import { existsSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { makeDirs } from './fsDirs.js';
import { giveToOwnerOf } from './storage/ownership.js';

/**
 * The single executable (Node's SEA, docs/executable.md) carries files that cannot live in
 * the JavaScript bundle as SEA assets: better-sqlite3's addon and the built dashboard. They
 * are extracted once under `<data-dir>/.cache/` (not /tmp: a noexec /tmp makes dlopen fail),
 * into a directory named after their content hash, so a new executable never reuses the
 * files of an older one, and each extraction is atomic (write to a temp name, then rename),
 * so a crash or a second process starting at the same time never sees half a file.
 */

/** Asset names, shared with scripts/build-binary.mjs (which writes them). */
export const SEA_ASSET = {
  addon: 'better_sqlite3.node',
  /** JSON: {"hash": "<sha256 of the dashboard files>", "files": ["index.html", "assets/…"]} */
  webManifest: 'web-manifest.json',
  webPrefix: 'web/',
  /** `<asset><suffix>`: the first 16 hex digits of the asset's SHA-256, written by the build. */
  digestSuffix: '.sha256',
} as const;

interface SeaApi {
  isSea(): boolean;
  getRawAsset(name: string): ArrayBuffer;
}

let seaApi: SeaApi | null | undefined;

/** node:sea when running as the single executable; null from source or the plain bundle. */
export function runningSea(): SeaApi | null {
  if (seaApi !== undefined) return seaApi;
  seaApi = null;
  try {
    // node:sea exists from Node 20.12. Inside a SEA the main script's require loads only
    // built-in modules, which is all this needs.
    const sea = (typeof require === 'function' ? require('node:sea') : null) as SeaApi | null;
    if (sea?.isSea()) seaApi = sea;
  } catch {
    // an older runtime, or ESM without require (tests from source): not a SEA.
  }
  return seaApi;
}

function cacheRoot(dataDir: string): string {
  const root = path.join(dataDir, '.cache');
  makeDirs(root, 0o700);
  giveToOwnerOf(dataDir, [root]);
  return root;
}

/**
 * Extracts one asset to `<data-dir>/.cache/<sha256 prefix>/<fileName>` unless it is already
 * there with the right size, and returns the file's path.
 */
export function extractAssetFile(sea: SeaApi, dataDir: string, assetName: string, fileName: string, mode = 0o600): string {
  // A view of the asset inside the mapped executable: nothing is read until it is used.
  const bytes = Buffer.from(sea.getRawAsset(assetName));
  // The build stores the digest beside the asset (`<name>.sha256`): hashing the 2 MB addon on
  // every start would read all its pages of the executable into memory, and they stay in the idle RSS.
  const digest = builtDigest(sea, assetName) ?? createHash('sha256').update(bytes).digest('hex').slice(0, 16);
  const dir = path.join(cacheRoot(dataDir), digest);
  const file = path.join(dir, fileName);
  if (existsSync(file) && statSync(file).size === bytes.length) return file;
  makeDirs(dir, 0o700);
  giveToOwnerOf(dataDir, [dir]);
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, bytes, { mode });
  giveToOwnerOf(dataDir, [tmp]);
  renameSync(tmp, file);
  return file;
}

/** The first 16 hex digits of the asset's SHA-256 as the build recorded it, or null (an older build). */
function builtDigest(sea: SeaApi, assetName: string): string | null {
  try {
    const text = Buffer.from(sea.getRawAsset(assetName + SEA_ASSET.digestSuffix))
      .toString('utf8')
      .trim();
    return /^[0-9a-f]{16}$/.test(text) ? text : null;
  } catch {
    return null;
  }
}

/**
 * Extracts the dashboard files listed in the web manifest into
 * `<data-dir>/.cache/web-<hash>/` (once: the whole directory is written under a temp name and
 * renamed into place) and returns that directory, or null when the executable was built
 * without a dashboard.
 */
export function extractWebRoot(sea: SeaApi, dataDir: string): string | null {
  let manifest: { hash: string; files: string[] };
  try {
    manifest = JSON.parse(Buffer.from(sea.getRawAsset(SEA_ASSET.webManifest)).toString('utf8'));
  } catch {
    return null;
  }
  if (!manifest.files.includes('index.html')) return null;
  const root = cacheRoot(dataDir);
  const dir = path.join(root, `web-${manifest.hash.slice(0, 16)}`);
  if (existsSync(path.join(dir, 'index.html'))) return dir;
  const tmp = path.join(root, `.web-${manifest.hash.slice(0, 16)}.${process.pid}.tmp`);
  // The manifest is written by our own build, but a path never escapes the directory.
  for (const rel of manifest.files) {
    if (!path.join(tmp, rel).startsWith(tmp + path.sep)) throw new Error(`bad dashboard asset path: ${rel}`);
  }
  rmSync(tmp, { recursive: true, force: true });
  for (const rel of manifest.files) {
    const target = path.join(tmp, rel);
    makeDirs(path.dirname(target), 0o700);
    writeFileSync(target, Buffer.from(sea.getRawAsset(SEA_ASSET.webPrefix + rel)));
  }
  giveToOwnerOf(dataDir, [tmp]);
  try {
    renameSync(tmp, dir);
  } catch (err) {
    // Another process extracted the same files first: use theirs.
    rmSync(tmp, { recursive: true, force: true });
    if (!existsSync(path.join(dir, 'index.html'))) throw err;
  }
  return dir;
}
