// Bundles the CLI and server into dist/telemetryd.cjs (one CommonJS file), the file the
// single executable is made from. better-sqlite3's native addon is loaded at run time
// (src/storage/native.ts), so it stays outside the bundle.
import { build } from 'esbuild';
import { execSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { buildWeb } from './build-web.mjs';

let commit = 'unknown';
try {
  commit = execSync('git rev-parse --short HEAD', { stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
} catch {
  // not a git checkout (a source tarball): keep "unknown"
}

mkdirSync('dist', { recursive: true });
await build({
  entryPoints: ['cli/main.ts'],
  outfile: 'dist/telemetryd.cjs',
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  sourcemap: 'linked',
  legalComments: 'none',
  // Strips comments and whitespace: a single non-ASCII character in a kept comment (§, →) made
  // V8 hold the whole 6 MB source as a two-byte string, 12 MB of idle RSS (BENCHMARKS.md).
  // Names stay readable; the linked source map maps stack traces back to the sources.
  minifyWhitespace: true,
  logLevel: 'warning',
  define: {
    __TELEMETRYD_BUNDLE__: 'true',
    __TELEMETRYD_COMMIT__: JSON.stringify(commit),
  },
  // debug (via mqtt-packet) optionally requires supports-color; keep it out of the bundle.
  alias: { 'supports-color': './scripts/empty-module.cjs' },
  banner: { js: '#!/usr/bin/env node' },
});

// The dashboard's files (dist/web), served by the server and shipped in the executable.
await buildWeb();
