// Bundles the dashboard (web/) into dist/web: index.html, app.js, app.css. Everything is
// local (no CDN, no external fonts), so the dashboard works offline and inside the single
// executable, which ships dist/web as its assets.

import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { build } from 'esbuild';

export async function buildWeb() {
  rmSync('dist/web', { recursive: true, force: true });
  mkdirSync('dist/web', { recursive: true });
  await build({
    entryPoints: { app: 'web/src/main.ts' },
    outdir: 'dist/web',
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: ['es2020', 'chrome100', 'firefox100', 'safari15'],
    minify: true,
    sourcemap: false,
    legalComments: 'none',
    logLevel: 'warning',
  });
  await build({ entryPoints: { app: 'web/app.css' }, outdir: 'dist/web', bundle: true, minify: true, logLevel: 'warning' });
  copyFileSync('web/index.html', 'dist/web/index.html');
  copyFileSync('web/favicon.svg', 'dist/web/favicon.svg');
}

if (import.meta.url === `file://${process.argv[1]}`) await buildWeb();
