// Bundles the CLI and server into dist/telemetryd.cjs (one CommonJS file), the file the
// single executable is made from. better-sqlite3's native addon is loaded at run time
// (src/storage/native.ts), so it stays outside the bundle.

import { execSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { build } from 'esbuild';
import { buildWeb } from './build-web.mjs';
import { bundleOptions } from './bundle-options.mjs';

let commit = 'unknown';
try {
  commit = execSync('git rev-parse --short HEAD', { stdio: ['ignore', 'pipe', 'ignore'] })
    .toString()
    .trim();
} catch {
  // not a git checkout (a source tarball): keep "unknown"
}

mkdirSync('dist', { recursive: true });
await build(bundleOptions({ commit }));

// The dashboard's files (dist/web), served by the server and shipped in the executable.
await buildWeb();
