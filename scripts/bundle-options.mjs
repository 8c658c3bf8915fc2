// esbuild options of the CommonJS bundle (scripts/build.mjs) and of the single executable's
// main script and lazily loaded asset bundles (scripts/build-binary.mjs).
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Packages the code imports only with `import()` on first use (an Excel export, the first
 * start's certificate, the first alert email, a backup or restore, a PostgreSQL database URL).
 * In the single executable each is its own SEA asset `lazy/<name>.cjs` instead of part of the
 * main script (src/seaLazy.ts).
 */
export const LAZY_PACKAGES = ['exceljs', 'selfsigned', 'nodemailer', 'tar', 'pg'];
export const lazyAssetName = (pkg) => `lazy/${pkg}.cjs`;

const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  legalComments: 'none',
  // Strips comments and whitespace: a single non-ASCII character in a kept comment (§, →) makes
  // V8 hold the whole source as a two-byte string, doubling its share of idle RSS (BENCHMARKS.md, "Design decisions").
  // Names stay readable; the linked source map maps stack traces back to the sources.
  minifyWhitespace: true,
  logLevel: 'warning',
  // debug loggers (mqtt-packet, json-schema-resolver) are never enabled here: a no-op stands in
  // for the package (scripts/noop-debug.cjs); supports-color, which debug may require, stays out.
  // pg-native (libpq) stays out too: pg finds it missing, as on an install without it
  // (scripts/no-pg-native.cjs).
  alias: {
    debug: path.join(root, 'scripts', 'noop-debug.cjs'),
    'supports-color': path.join(root, 'scripts', 'empty-module.cjs'),
    'pg-native': path.join(root, 'scripts', 'no-pg-native.cjs'),
  },
};

/** Resolves our own `import('<lazy package>')` to src/seaLazy.ts loading its asset. */
const seaLazyPlugin = {
  name: 'sea-lazy',
  setup(b) {
    const filter = new RegExp(`^(${LAZY_PACKAGES.join('|')})$`);
    b.onResolve({ filter }, (args) =>
      args.importer.includes(`${path.sep}node_modules${path.sep}`) ? undefined : { path: args.path, namespace: 'sea-lazy' },
    );
    b.onLoad({ filter: /.*/, namespace: 'sea-lazy' }, (args) => ({
      contents: `module.exports = require(${JSON.stringify(path.join(root, 'src', 'seaLazy.ts'))}).loadLazyAsset(${JSON.stringify(lazyAssetName(args.path))});`,
      resolveDir: root,
      loader: 'js',
    }));
  },
};

/**
 * The CLI and server in one CommonJS file. `sea: true`: the single executable's main script,
 * with the LAZY_PACKAGES left out (loaded from their assets).
 */
export function bundleOptions({ commit, outfile = 'dist/telemetryd.cjs', sea = false }) {
  return {
    ...common,
    entryPoints: [path.join(root, 'cli', 'main.ts')],
    outfile,
    sourcemap: 'linked',
    define: {
      __TELEMETRYD_BUNDLE__: 'true',
      __TELEMETRYD_COMMIT__: JSON.stringify(commit),
    },
    // The SEA main script is wrapped like a CommonJS module: a leading #! line would not parse.
    ...(sea ? { plugins: [seaLazyPlugin] } : { banner: { js: '#!/usr/bin/env node' } }),
  };
}

/** One lazily loaded package as a self-contained CommonJS bundle (its module.exports). */
export function lazyBundleOptions(pkg, outfile) {
  return {
    ...common,
    stdin: { contents: `module.exports = require(${JSON.stringify(pkg)});`, resolveDir: root, loader: 'js' },
    outfile,
  };
}
