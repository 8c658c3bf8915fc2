// The official Node the single executable is built on, shared by the build and the benchmark
// (which runs its bare baselines on the same Node, so both sides have the same TLS library).
import path from 'node:path';

/** A current LTS, pinned exactly (the executable's blob must match it). */
export const NODE_VERSION = '22.23.3';

/** Where build-binary unpacks that Node for one arch (npm package node-linux-<arch>), under .cache. */
export const baseNodeDir = (cacheDir, nodeArch) => path.join(cacheDir, `node-${NODE_VERSION}-linux-${nodeArch}`);
