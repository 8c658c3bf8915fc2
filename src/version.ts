import pkg from '../package.json' with { type: 'json' };

declare const __TELEMETRYD_COMMIT__: string | undefined;

export const VERSION: string = pkg.version;
/** Git commit the executable was built from, stamped in by scripts/build.mjs. */
export const COMMIT: string = typeof __TELEMETRYD_COMMIT__ !== 'undefined' ? __TELEMETRYD_COMMIT__ : 'dev';
